"""Deep trees through snapshots, forks, export and import (issue 15).

A command may make a directory tree as deep as its inode limit allows: 800 and 5,000 levels
here, deeper than PATH_MAX (the 5,000-level path is about 10 KB). Every image operation must
carry it whole: snapshot then restore, fork, export then import into a fresh sandbox. Raw
JSON-RPC over `sbx serve --stdio`, with the helpers of test_image.py.
"""
import pytest

from test_image import new_box, srv  # noqa: F401 (srv is a fixture)

NAME = "d"
DATA = "deepest data\n"


# No command is given a path of the deep tree (longer than PATH_MAX) nor cds along it (bash
# takes seconds for that): mkdir -p and find go one component at a time.
def build(box, levels):
    """Makes /home/user/d/d/.../d (levels directories) with the file f at the bottom."""
    box.sh(f"cd /home/user && mkdir -p \"$(printf '{NAME}/%.0s' $(seq {levels}))\" && "
           f"find {NAME} -type d -empty -execdir sh -c 'printf \"{DATA.rstrip()}\\n\" > \"$0/f\"' {{}} \\;",
           timeout=60)


def at_bottom(box, cmd):
    """Runs cmd (sh) in the directory of the deepest file f, and gives its output."""
    return box.sh(f"cd /home/user && find {NAME} -name f -type f -execdir sh -c '{cmd}' \\;", timeout=60)


def deepest(box, levels):
    """What the file at the bottom holds, its size, and the number of directories above it."""
    return at_bottom(box, "cat f; stat -c %s f") + box.sh(f"find /home/user/{NAME} -type d | wc -l")


def expected(levels):
    return f"{DATA}{len(DATA)}\n{levels}\n"


LEVELS = [800, 5000]


@pytest.mark.parametrize("levels", LEVELS)
def test_snapshot_and_restore_of_a_deep_tree(srv, levels):  # noqa: F811
    box = new_box(srv)
    build(box, levels)
    snap = box.snapshot()
    box.sh(f"rm -rf /home/user/{NAME} && echo after > /home/user/later")
    assert box.sh(f"test -e /home/user/{NAME} && echo present || echo gone") == "gone\n"
    box.restore(snap)
    assert deepest(box, levels) == expected(levels)
    assert box.sh("test -e /home/user/later && echo present || echo gone") == "gone\n"


@pytest.mark.parametrize("levels", LEVELS)
def test_fork_of_a_deep_tree(srv, levels):  # noqa: F811
    src = new_box(srv)
    build(src, levels)
    fork = src.fork()
    assert deepest(fork, levels) == expected(levels)
    # The two are independent: the fork's deepest file changes, the source's does not.
    at_bottom(fork, "echo changed > f")
    assert at_bottom(fork, "cat f") == "changed\n"
    assert deepest(src, levels) == expected(levels)


@pytest.mark.parametrize("levels", LEVELS)
def test_export_and_import_of_a_deep_tree(srv, levels):  # noqa: F811
    src = new_box(srv)
    build(src, levels)
    data = src.export()
    dst = new_box(srv)
    res = dst.import_(data)
    assert "error" not in res, res
    assert deepest(dst, levels) == expected(levels)
    assert at_bottom(dst, "sha256sum f; stat -c %a f") == at_bottom(src, "sha256sum f; stat -c %a f")


@pytest.mark.parametrize("levels", LEVELS)
def test_files_rm_of_a_deep_tree(srv, levels):  # noqa: F811
    # The files API removes a tree the same way, without recursion: any depth, all of it.
    box = new_box(srv)
    build(box, levels)
    box.sh("mkdir /home/user/other && echo keep > /home/user/other/f")
    assert srv.result("files.rm", box.p(path=f"/home/user/{NAME}", recursive=True)) == {"ok": True}
    assert box.sh(f"test -e /home/user/{NAME} && echo present || echo gone") == "gone\n"
    assert box.sh("cat /home/user/other/f") == "keep\n"
