"""ModelRename: the `"model"` fields of an upstream's answer renamed to the id the client asked for, whole or
streamed in reads that split an event (or the field itself) anywhere."""

from __future__ import annotations

import json

from app.service.gateway.model_names import ModelRename

EVENTS = (
    b"".join(
        b"data: " + json.dumps({"id": "c", "model": "big", "choices": [{"delta": {"content": w}}]}).encode() + b"\n\n"
        for w in ("big", "model", '"model": "big"')
    )
    + b"data: [DONE]\n\n"
)


def test_every_split_of_a_stream_gives_the_same_renamed_stream() -> None:
    expected = EVENTS.replace(b'"model": "big", "choices"', b'"model": "gpu/big", "choices"')
    assert expected != EVENTS and expected.count(b'"gpu/big"') == 3
    for cut in range(1, len(EVENTS)):
        rename = ModelRename("big", "gpu/big")
        out = rename.feed(EVENTS[:cut]) + rename.feed(EVENTS[cut:]) + rename.flush()
        assert out == expected, cut


def test_a_whole_answer_and_other_spacing() -> None:
    rename = ModelRename("big", "gpu/big")
    assert rename.whole(b'{"model":"big","x":"big"}') == b'{"model":"gpu/big","x":"big"}'
    assert rename.whole(b'{"model" : "bigger"}') == b'{"model" : "bigger"}'  # only that exact id
    assert rename.whole(b'{"model": "big"}') == b'{"model": "gpu/big"}'
