"""Networks: the Multus NetConf of a request, and the delegates it resolves to."""
