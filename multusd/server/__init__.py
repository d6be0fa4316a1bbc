"""The daemon's HTTP API on the unix socket."""
