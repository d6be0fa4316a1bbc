"""multusd: an asyncio-native, drop-in re-implementation of the Multus CNI thick plugin daemon."""

__version__ = "0.1.0"
