"""cni_shim.gopath against Go's own ``path/filepath`` test table (``clean_test``, ``join_test``)."""

from __future__ import annotations

import pytest

from cni_shim import gopath
from tests.unit.cni_shim.shimfakes import bare_python

# From Go's src/path/filepath/path_test.go (cleantests, the Unix ones).
CLEAN = [
    ("abc", "abc"), ("abc/def", "abc/def"), ("a/b/c", "a/b/c"), (".", "."), ("..", ".."),
    ("../..", "../.."), ("../../abc", "../../abc"), ("/abc", "/abc"), ("/", "/"), ("", "."),
    ("abc/", "abc"), ("abc/def/", "abc/def"), ("a/b/c/", "a/b/c"), ("./", "."), ("../", ".."),
    ("../../", "../.."), ("/abc/", "/abc"), ("abc//def//ghi", "abc/def/ghi"), ("//abc", "/abc"),
    ("///abc", "/abc"), ("//abc//", "/abc"), ("abc//", "abc"), ("abc/./def", "abc/def"),
    ("/./abc/def", "/abc/def"), ("abc/.", "abc"), ("abc/def/ghi/../jkl", "abc/def/jkl"),
    ("abc/def/../ghi/../jkl", "abc/jkl"), ("abc/def/..", "abc"), ("abc/def/../..", "."),
    ("/abc/def/../..", "/"), ("abc/def/../../..", ".."), ("/abc/def/../../..", "/"),
    ("abc/def/../../../ghi/jkl/../../../mno", "../../mno"), ("/../abc", "/abc"),
    ("abc/./../def", "def"), ("abc//./../def", "def"), ("abc/../../././../def", "../../def"),
]  # fmt: skip

# From Go's jointests.
JOIN = [
    ((), ""), (("",), ""), (("a",), "a"), (("a", "b"), "a/b"), (("a", ""), "a"), (("", "b"), "b"),
    (("/", "a"), "/a"), (("/", "a/b"), "/a/b"), (("/", ""), "/"), (("//", "a"), "/a"),
    (("/a", "b"), "/a/b"), (("a/", "b"), "a/b"), (("a/", ""), "a"), (("", ""), ""),
    (("/run/multus/", "multus.sock"), "/run/multus/multus.sock"), (("a", "/b"), "a/b"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "cleaned"), CLEAN)
def test_clean_is_gos(path: str, cleaned: str) -> None:
    assert gopath.clean(path) == cleaned


@pytest.mark.parametrize(("elements", "joined"), JOIN)
def test_join_is_gos(elements: tuple[str, ...], joined: str) -> None:
    assert gopath.join(*elements) == joined


def test_the_shims_start_imports_no_os() -> None:
    # os (with stat, posixpath, _collections_abc) is ~2 ms of every start of the shim.
    out = bare_python(
        "import cni_shim.__main__, cni_shim.shim; "
        "print(' '.join(m for m in ('os', 'posixpath', 'stat', 'enum', 're') if m in sys.modules))"
    )
    assert out.split() == []
