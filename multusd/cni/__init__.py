"""The CNI engine: a port of libcni that runs delegate plugins without blocking the loop.

``conf`` parses configs and builds each plugin's stdin, ``invoke`` finds and runs plugin
executables (kill and reap on timeout or cancellation), ``cache`` keeps libcni's result cache,
and ``api`` strings them together with libcni's ADD/CHECK/DEL/GC/STATUS semantics.
"""
