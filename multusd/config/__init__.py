"""Configuration: the daemon config file, the generated multus config, readiness."""
