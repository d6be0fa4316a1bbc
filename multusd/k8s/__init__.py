"""Talking to the Kubernetes API: kubernetes_asyncio behind one token bucket, list+watch caches.

The client is kubernetes_asyncio's (``apiconfig`` loads its configuration, ``apiclient`` puts
every request through the request slots and the 50-QPS bucket); the caches are ours
(``reflector``, ``store``). Objects are plain dicts (or protobuf decoded by ``kproto``): the
library's generated models are never built.
"""
