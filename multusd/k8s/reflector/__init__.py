"""List then watch one resource into a ``Store``, forever, surviving whatever the API does.

This is client-go's reflector, which no Python Kubernetes client provides. One ``run()`` loop:

* **list**, in one of two ways, both decoding one object (or one page) at a time so that a big
  list never sits in memory whole:

  - a **streaming list** (``streaming``, KEP-3157): one watch with ``sendInitialEvents=true``,
    ``resourceVersionMatch=NotOlderThan`` and bookmarks; the server sends the current objects
    as ADDED events, then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` at their
    version, and the same stream goes on as the watch. A server without the feature refuses
    the parameters (422); the reflector then lists in pages for the rest of its life, as
    client-go falls back;
  - a **paged list** (``limit``/``continue``), trimming each page as it arrives; a 410 on a
    continue token (the list outlived the server's history) restarts the list, and a second
    one falls back to one unpaged list, as client-go's pager does, so the list always
    finishes. The version asked for is client-go's choice, so that a thousand daemons
    starting at once are answered from the apiserver's watch cache rather than by etcd (see
    ``_list``). That cache answers a list at resourceVersion "0" whole, ignoring ``limit``:
    against a real apiserver it is the streaming list that bounds the transient memory;

  the new objects replace the store's in one swap (``Store.replace``), and an object whose UID
  and version did not change is kept as the store already has it, so a relist costs memory
  only for what changed;
* **watch** from the list's resourceVersion with bookmarks and a random ``timeoutSeconds``
  (spreading the re-watches of many daemons); when the server ends the stream at that timeout
  the watch simply resumes from the last version seen, no relist;
* an **inactivity watchdog**: a stream silent for longer than ``inactivity_timeout`` (the
  server sends a bookmark about every minute) is treated as dead and restarted. Half-open
  connections behind NAT and load balancers are the classic cause of silently stale caches
  (kopf's long issue history);
* **a version the server rejects** means a relist, as client-go does: 410 Gone/Expired (the
  version left the server's history: relist "not older than" it), and ``Timeout: Too large
  resource version`` or an invalid version (the server is older than what we saw, as after an
  etcd restore, or does not know it: relist from scratch, a consistent list without a
  version). Resuming the watch instead would retry forever, or, once the restored server's
  versions pass ours, silently keep objects that no longer exist (old UIDs);
* **any other error** waits with exponential backoff and full jitter (honouring Retry-After),
  then resumes the watch from the last version (or retries the relist). The backoff resets
  after a healthy watch, a second rejection in a row without progress is backed off too, and a
  stream that ends at once without a single event counts as an error (client-go's "very short
  watch"), so a misbehaving server can never make this loop spin.

No tasks are spawned: cancelling ``run()`` closes the one open request and ends it at once.

One module per part of that loop; callers import from the modules:

* :mod:`.loop`: :class:`~multusd.k8s.reflector.loop.Reflector`, the loop itself, and what it
  does after each failure (relist, back off, stop asking for streaming lists);
* :mod:`.base`: its settings, its client (:class:`~.base.ListWatchClient`), its state and
  statistics, and what a complete list does to the store;
* :mod:`.listing`: paged lists (``limit``/``continue``) and their restarts;
* :mod:`.watching`: one watch request, a streaming list's or one from a version, with its
  inactivity watchdog, and the events it applies;
* :mod:`.policy`: which errors reject a version or refuse streaming lists, and the backoff.
"""
