"""The lock's record of a published image, checked with no registry and no Docker: what a pull
refuses before it downloads anything, and what pinning a release key changes (not the digest)."""

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.dsse import envelope_for, init_keys, load_signer
from appliance.core.errors import ConfigError, IntegrityError
from appliance.engine.lock import load_lock
from appliance.images import labels as L
from appliance.release.published import (
    ImageRecord,
    pin_release_key,
    pinned_release_keys,
    publish_image,
    verified_record,
)
from tests.conftest import REPO

REFERENCE = f"127.0.0.1:5000/{L.IMAGE_REPOSITORY}@sha256:{'ab' * 32}"
IMAGE_ID = "sha256:" + "cd" * 32


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    """A lock copy with a pinned release key and a cpu image recorded and signed by it."""
    key = tmp_path / "key"
    init_keys(key)
    lock_path = tmp_path / "llama.cpp.lock.json"
    lock_path.write_bytes((REPO / "engine" / "llama.cpp.lock.json").read_bytes())
    pin_release_key(load_lock(lock_path), key)
    return {"key": key, "lock": lock_path, "tmp": tmp_path}


def record_with(setup: dict[str, Any], change: Any = None, key: Path | None = None, **fields: Any) -> Path:
    """Write a published cpu entry (its record signed by `key`, default the pinned one) after
    `change(entry)`; the lock's path."""
    lock = load_lock(setup["lock"])
    record = ImageRecord(
        **{
            "target": "cpu",
            "reference": REFERENCE,
            "image_id": IMAGE_ID,
            "labels": {L.TARGET: "cpu"},
            "lock_digest": lock.digest,
            "transfer_bytes": 42,
            **fields,
        }
    )
    entry = {
        "reference": REFERENCE,
        "record": envelope_for(record.statement(), load_signer(key or setup["key"])),
    }
    if change is not None:
        change(entry)
    raw = json.loads(setup["lock"].read_text())
    raw["published_images"] = {"cpu": entry}
    setup["lock"].write_text(json.dumps(raw))
    return Path(setup["lock"])


def test_pinning_a_key_leaves_the_lock_digest_alone(setup: dict[str, Any]) -> None:
    assert load_lock(setup["lock"]).digest == load_lock().digest
    keyid = load_signer(setup["key"]).public_key.keyid
    assert list(pinned_release_keys(load_lock(setup["lock"]))) == [keyid]


def test_a_good_record_is_read_back_with_its_signer(setup: dict[str, Any]) -> None:
    record = verified_record(load_lock(record_with(setup)), "cpu")
    assert record.reference == REFERENCE and record.image_id == IMAGE_ID and record.transfer_bytes == 42
    assert record.signed_by == load_signer(setup["key"]).public_key.keyid


def _tamper(entry: dict[str, Any]) -> None:
    statement = json.loads(base64.b64decode(entry["record"]["payload"]))
    statement["predicate"]["image_id"] = "sha256:" + "ee" * 32
    entry["record"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_tamper, "does not match its contents (altered after signing): refused"),
        (lambda e: e["record"].update(signatures=[]), "record is unsigned: refused"),
        (lambda e: e.pop("record"), "has no signed record: refused"),
        (lambda e: e.update(reference=REFERENCE.replace("ab", "ba", 1)), "the signed record is for "),
        (lambda e: e["record"].update(payloadType="text/plain"), "record is malformed"),
    ],
    ids=["tampered", "unsigned", "missing", "other-digest", "not-in-toto"],
)
def test_a_record_that_does_not_vouch_for_the_reference_is_refused(
    setup: dict[str, Any], change: Any, says: str
) -> None:
    with pytest.raises(IntegrityError, match=f"published_images.cpu.*{re.escape(says)}"):
        verified_record(load_lock(record_with(setup, change)), "cpu")


def test_a_record_for_another_lock_or_target_is_refused(setup: dict[str, Any]) -> None:
    with pytest.raises(IntegrityError, match="was made for lock 000000000000"):
        verified_record(load_lock(record_with(setup, lock_digest="0" * 64)), "cpu")
    with pytest.raises(IntegrityError, match="is for target sm120: refused"):
        verified_record(load_lock(record_with(setup, target="sm120")), "cpu")


def test_a_key_the_lock_does_not_pin_is_refused_by_name(setup: dict[str, Any]) -> None:
    stranger = init_keys(setup["tmp"] / "stranger")
    with pytest.raises(IntegrityError, match=f"signed by {stranger.keyid}, which the lock does not pin"):
        verified_record(load_lock(record_with(setup, key=setup["tmp"] / "stranger")), "cpu")


def test_a_lock_that_pins_no_key_says_how_to_pin_one(setup: dict[str, Any]) -> None:
    path = record_with(setup)
    raw = json.loads(path.read_text())
    del raw["release_keys"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="pins no release key.*appliance image pin-key"):
        verified_record(load_lock(path), "cpu")


def test_a_key_filed_under_another_id_is_refused(setup: dict[str, Any]) -> None:
    raw = json.loads(setup["lock"].read_text())
    (keyid, key), *_ = raw["release_keys"].items()
    raw["release_keys"] = {"0" * 64: key}
    setup["lock"].write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=f"the key's id is {keyid}"):
        pinned_release_keys(load_lock(setup["lock"]))


def test_publishing_with_an_unpinned_key_is_refused_before_any_push(setup: dict[str, Any]) -> None:
    init_keys(setup["tmp"] / "stranger")
    before = setup["lock"].read_bytes()
    with pytest.raises(ConfigError, match="is not pinned in .*appliance image pin-key"):
        publish_image(load_lock(setup["lock"]), "cpu", "127.0.0.1:9", load_signer(setup["tmp"] / "stranger"))
    assert setup["lock"].read_bytes() == before
