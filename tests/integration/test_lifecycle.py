"""Sandbox lifecycle over JSON-RPC: metadata given at creation, shown and filtered by
sandbox.list."""
from test_rpc import stdio  # noqa: F401 (the fixture: `sbx serve --stdio` and a Peer on it)

INVALID_PARAMS = -32602


def _ids(peer, params=None):
    return sorted(s["sandboxId"] for s in peer.result("sandbox.list", params)["sandboxes"])


def test_metadata_listed_and_filtered(stdio):
    a = stdio.result("sandbox.create", {"metadata": {"team": "red", "job.id": "42"}})["sandboxId"]
    b = stdio.result("sandbox.create", {"metadata": {"team": "blue", "job.id": "42"}})["sandboxId"]
    root = stdio.result("create")["sandboxId"]
    listed = {s["sandboxId"]: s for s in stdio.result("sandbox.list")["sandboxes"]}
    assert listed[a]["metadata"] == {"team": "red", "job.id": "42"}
    assert listed[b]["metadata"] == {"team": "blue", "job.id": "42"}
    assert listed[root]["metadata"] == {}
    assert _ids(stdio, {"metadata": {"team": "red"}}) == [a]
    assert _ids(stdio, {"metadata": {"job.id": "42"}}) == sorted([a, b])
    assert _ids(stdio, {"metadata": {"job.id": "42", "team": "blue"}}) == [b]
    assert _ids(stdio, {"metadata": {"team": "green"}}) == []
    assert _ids(stdio, {"metadata": {}}) == sorted([a, b, root])
    # A destroyed sandbox takes its metadata with it.
    stdio.result("sandbox.destroy", {"sandboxId": a})
    assert _ids(stdio, {"metadata": {"team": "red"}}) == []


def test_metadata_on_create(stdio):
    root = stdio.result("create", {"metadata": {"k": "v"}})["sandboxId"]
    assert _ids(stdio, {"metadata": {"k": "v"}}) == [root]


def test_metadata_bounds(stdio):
    def refused(metadata, method="sandbox.create"):
        err = stdio.error(method, {"metadata": metadata})
        assert err["code"] == INVALID_PARAMS, err
        return err["message"]

    assert refused({f"k{i}": "v" for i in range(33)}) == "metadata has more than 32 keys"
    assert refused({"k" * 65: "v"}) == "metadata key must be 1-64 bytes"
    assert refused({"": "v"}) == "metadata key must be 1-64 bytes"
    assert refused({"a b": "v"}) == "metadata key must be of [A-Za-z0-9_.-]"
    assert refused({"n": 1}) == "metadata.n must be a string"
    assert refused({"big": "x" * 1025}) == "metadata.big is longer than 1024 bytes"
    assert refused(["a"]).startswith("metadata")
    assert refused({"n": 1}, "sandbox.list") == "metadata.n must be a string"
    assert refused({"n": None}, "create") == "metadata.n must be a string"
    # Nothing was made by the refused requests; the largest allowed metadata is taken.
    assert stdio.result("sandbox.list")["sandboxes"] == []
    full = {f"k{i:02d}" + "x" * 61: "v" * 1024 for i in range(32)}
    sid = stdio.result("sandbox.create", {"metadata": full})["sandboxId"]
    assert stdio.result("sandbox.list", {"metadata": {"k00" + "x" * 61: "v" * 1024}})["sandboxes"][0] == {
        **stdio.result("sandbox.list")["sandboxes"][0], "sandboxId": sid, "metadata": full}
