"""The emulator and kubectl fixtures, shared with the emulator's own tests."""

from tests.kubesim.conftest import kubeconfig, kubectl, kubectl_bin, kubesim

__all__ = ["kubeconfig", "kubectl", "kubectl_bin", "kubesim"]
