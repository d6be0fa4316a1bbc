"""Talking to the Kubernetes API: one rate-limited HTTP client, list+watch caches.

Deliberately not kubernetes_asyncio at runtime: importing any part of it loads every generated
model class (RSS 33 → 71 MiB), and the daemon must idle within upstream's ~44 MiB. Objects are
plain dicts decoded with ``json.loads``.
"""
