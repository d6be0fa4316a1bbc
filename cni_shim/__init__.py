"""The multus-shim: a tiny, stdlib-only CNI plugin that forwards requests to multusd.

Also home of the stdlib-only CNI types that the daemon shares (errors, results, wire format),
so that both ends agree byte for byte from one definition.
"""
