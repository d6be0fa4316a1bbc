"""The emulator and kubectl fixtures, shared with the emulator's own tests (the hook too:
``kubectl_bin`` runs each kubectl test with both ends of the kubectls the machine has)."""

from tests.kubesim.conftest import (
    kubeconfig,
    kubectl,
    kubectl_bin,
    kubesim,
    kustomize_bin,
    pytest_generate_tests,
)

__all__ = [
    "kubeconfig",
    "kubectl",
    "kubectl_bin",
    "kubesim",
    "kustomize_bin",
    "pytest_generate_tests",
]
