"""The token-row arithmetic of tokenizer merges (mgit.merge.vocab), without transformers: which
input row goes where, which default each token gets (mergekit's rules), the rows themselves and
the padding. The merge against mergekit itself: test_tokenizer_merge.py."""

from __future__ import annotations

import pytest
import torch

from mgit.errors import BadInputError
from mgit.merge import vocab as vc
from mgit.merge.vocab import ABSENT, TokenSource

VOCAB = {"a": 0, "b": 1, "c": 2, "d": 3}  # the merged vocabulary
OWN = {"A": {"a": 0, "b": 1, "c": 2}, "B": {"b": 0, "a": 1, "d": 2}, "C": {"a": 0, "b": 1}}
PERMS = {m: vc.permutation(VOCAB, OWN[m], len(OWN[m]), m) for m in OWN}


def test_permutation_and_runs():
    assert PERMS == {"A": [0, 1, 2, ABSENT], "B": [1, 0, ABSENT, 2], "C": [0, 1, ABSENT, ABSENT]}
    assert vc.runs(PERMS["A"]) == [[0, 0, 3]]
    assert vc.runs(PERMS["B"]) == [[0, 1, 1], [1, 0, 1], [3, 2, 1]]
    with pytest.raises(BadInputError, match="past the model's 2 embedding rows"):
        vc.permutation(VOCAB, OWN["A"], 2, "A")


def test_padded_size():
    assert [vc.padded_size(n, 16) for n in (1, 16, 17, 36)] == [16, 16, 32, 48]
    assert vc.padded_size(36, None) == 36


def test_row_plan_follows_mergekits_rules():
    plan = vc.row_plan(VOCAB, ["A", "B", "C"], PERMS, {}, None)
    # c: only A holds it; d: only B; a and b: every input holds them (no default)
    assert [(r.token, r.source.kind, r.source.model) for r in plan] == [("c", "model", "A"), ("d", "model", "B")]
    assert vc.row_plan(VOCAB, ["A"], {"A": [0, 1, 2, 3]}, {}, None) == []
    # a token two of three inputs hold: the base's row where the base holds it, else their mean
    perms = {"A": [0, 1, 2, ABSENT], "B": [1, 0, 2, ABSENT], "C": [0, 1, ABSENT, 2]}
    assert [r.source for r in vc.row_plan(VOCAB, ["A", "B", "C"], perms, {}, "B")][0] == TokenSource("model", "B")
    assert [r.source.kind for r in vc.row_plan(VOCAB, ["A", "B", "C"], perms, {}, None)] == ["average", "model"]
    # the config's source wins; force makes a default even where every input holds the token
    cfg = {"a": TokenSource("zero", force=True), "c": TokenSource("model", model="B")}
    assert [(r.token, r.source.kind) for r in vc.row_plan(VOCAB, ["A", "B", "C"], perms, cfg, None)] == [
        ("a", "zero"),
        ("c", "model"),
        ("d", "model"),
    ]


def test_row_plan_refusals():
    with pytest.raises(BadInputError, match="does not hold it"):
        vc.row_plan(VOCAB, ["A", "B"], PERMS, {"c": TokenSource("model", model="B")}, None)
    with pytest.raises(BadInputError, match="not one of the merged models"):
        vc.row_plan(VOCAB, ["A", "B"], PERMS, {"c": TokenSource("model", model="Z")}, None)
    with pytest.raises(BadInputError, match="needs a row from somewhere"):
        vc.row_plan(VOCAB, ["A", "B"], PERMS, {"c": TokenSource("none")}, None)


def test_rows_defaults_and_padding():
    g = torch.Generator().manual_seed(0)
    tensors = {m: torch.randn(len(OWN[m]), 4, generator=g).bfloat16() for m in ("A", "B")}
    perms = {"A": [0, 1, 2, ABSENT], "B": [1, 0, 2, ABSENT]}
    vocab = {"a": 0, "b": 1, "c": 2, "d": 3}
    cfg = {
        "d": TokenSource("model_token", model="B", token="d"),
        "b": TokenSource("zero", force=True),
    }
    own = {"A": OWN["A"], "B": OWN["B"]}
    plan = vc.row_plan(vocab, ["A", "B"], perms, cfg, None)
    defaults = vc.default_rows(plan, ["A", "B"], tensors, perms, own)
    forced = {r.token_id for r in plan if r.source.force}
    a = vc.aligned_rows(tensors["A"], perms["A"], defaults, forced, 8)
    b = vc.aligned_rows(tensors["B"], perms["B"], defaults, forced, 8)
    assert torch.equal(a[0], tensors["A"][0]) and torch.equal(b[0], tensors["B"][1])
    assert not a[1].any() and not b[1].any()  # forced to zero in both
    assert torch.equal(a[3], tensors["B"][2]) and torch.equal(b[3], tensors["B"][2])  # B's own "d" row
    assert torch.equal(a[4:], torch.mean(a[:4], dim=0).expand(4, 4))  # padding: the mean of the rows
    # a mean of inputs' rows is a running sum from zero, then divided, in the rows' dtype (mergekit's)
    three = {"A": [0], "B": [0], "C": [ABSENT]}
    rows = {m: torch.tensor([[1.0, 3.0]], dtype=torch.bfloat16) * (i + 1) for i, m in enumerate("ABC")}
    avg = vc.default_rows([vc.DefaultRow("a", 0, TokenSource("average"))], list("ABC"), rows, three, {})
    assert torch.equal(avg[0], ((torch.zeros(2, dtype=torch.bfloat16) + rows["A"][0] + rows["B"][0]) / 2))


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"tokenizer_source": "union", "tokenizer": {}}, "not both"),
        ({"tokenizer": {"source": 1}}, "tokenizer.source is union"),
        ({"tokenizer": {"tokens": {"x": {"source": "m", "force": "yes"}}}}, "force must be true or false"),
        (
            {"tokenizer": {"tokens": {"x": {"source": {"kind": "model_token", "model": "m"}}}}},
            "one of token_id or token",
        ),
        ({"tokenizer": {"tokens": {"x": {"weight": 1}}}}, "takes `source:` and `force:` only"),
        ({"chat_template": 3}, "chat_template is"),
    ],
)
def test_spec_refusals(doc, message):
    with pytest.raises(BadInputError, match=message):
        vc.parse_spec(doc, "m.yml")


def test_spec_forms():
    assert vc.parse_spec({}, "m.yml") is None
    spec = vc.parse_spec({"tokenizer_source": "base", "chat_template": "chatml"}, "m.yml")
    assert spec == vc.TokenizerSpec("base", chat_template="chatml") and spec.aligns
    assert not vc.parse_spec({"chat_template": "auto"}, "m.yml").aligns
    spec = vc.parse_spec(
        {
            "tokenizer": {
                "tokens": {"<t>": {"source": {"kind": "model_token", "model": "m", "token_id": 5}}, "<u>": None}
            }
        },
        "m.yml",
    )
    assert spec.source == "union"
    assert spec.tokens == {"<t>": TokenSource("model_token", model="m", token_id=5), "<u>": TokenSource("none")}


def test_model_references_in_their_mapping_form():
    """mergekit's ModelReference mapping form (``{model: {path: X}}``) names the model X."""
    ref = {"model": {"path": "math"}}
    assert vc.parse_spec({"tokenizer_source": ref}, "m.yml").source == "math"
    spec = vc.parse_spec(
        {
            "tokenizer": {
                "source": ref,
                "tokens": {
                    "<t>": {"source": ref},
                    "<u>": {"source": {"kind": "model_token", "model": ref, "token": "a"}},
                },
            }
        },
        "m.yml",
    )
    assert spec.source == "math"
    assert spec.tokens == {
        "<t>": TokenSource("model", model="math"),
        "<u>": TokenSource("model_token", model="math", token="a"),
    }
