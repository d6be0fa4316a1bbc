"""The multus-shim: a tiny, stdlib-only CNI plugin that forwards requests to multusd.

Also home of the stdlib-only CNI types that the daemon shares (errors, results, wire format),
so that both ends agree byte for byte from one definition, and of the Go-fidelity layer both
ends import: the ``go*`` modules, each named for what of Go it reproduces (``gojson``
encoding/json's bytes, ``godecode`` and ``gojsonerr`` its decoding and error texts, ``goquote``
``%q``, ``gofmt`` ``%v``/``%T``, ``gonum`` number texts, ``gosyscall`` errno and exit texts,
``gonet`` ``net.IP``). They are flat public modules rather than a subpackage so that the paths
the daemon already imported (``cni_shim.gojson``, ``cni_shim.goquote``, ...) stay the only ones,
and small, so that the shim loads just the two or three its start needs.
"""
