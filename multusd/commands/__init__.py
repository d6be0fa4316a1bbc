"""The CNI verbs as Multus runs them: one module per command."""
