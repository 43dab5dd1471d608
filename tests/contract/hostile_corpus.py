"""A bounded, seeded corpus of intake payloads as raw bytes, for the differential check
(test_differential.py): valid claims, every field at and just past its limits, wrong types,
unknown fields, unicode, huge numbers, duplicate keys, deep nesting, invalid UTF-8, not JSON at
all, and one payload over the server's max payload.

The field table is read from the exported schema (`schemas/json/claim.json`), so a new field or a
changed limit is fuzzed without editing this file. Every payload is unique in its first 1,024 bytes
(what a dead letter quotes), and every one that names a claim id names one of its own."""

from __future__ import annotations

import json
import random

from schemas.export import OUT

SEED = 20261124
MAX_PAYLOAD = 1 << 20
# every character some engine calls whitespace: Python's str.isspace, JavaScript's \s, JSON's own
WHITESPACE = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2000",
              "\u2028", "\u202f", "\u3000", "\ufeff", "\u180e", "\u200b"]
UNICODE = ["é", "ü", "ß", "ı", "K", "ﬀ", "٣", "𝟙", "😀", "中", "\u0301", "\x00", "\x7f", "\u200d", "\ufffd"]
BASES = [  # valid claims of each shape, to mutate one field at a time
    {"gpus": 2, "models": ["H100"]},
    {"gpu_milli": 250},
    {"gpus": 0, "cpu_milli": 500},
    {"mig_profile": "3g.40gb", "models": ["A100"]},
    {"gpus": 0, "model_memory_gib": 150, "models": ["H100"]},
    {"gpu_groups": ["HOPPER_141"], "cuda_versions": ["12.4"], "priority": 5},
]


def claim_properties() -> dict[str, dict]:
    schema = json.loads((OUT / "claim.json").read_text())
    return schema["$defs"]["ClaimSpec"]["properties"]


class Corpus:
    def __init__(self, tag: str):
        self.tag, self.items, self._heads = tag, [], set()

    def next_id(self) -> str:
        return f"h{len(self.items)}-{self.tag}"

    def add(self, name: str, data: bytes) -> None:
        head = data[:1024]
        if head not in self._heads:  # a dead letter quotes the first 1,024 bytes: keep them apart
            self._heads.add(head)
            self.items.append((name, data))

    def claim(self, name: str, fields: dict, *, raw_tail: str = "") -> None:
        """A claim with an id of its own, then `fields`, then `raw_tail` (JSON members as text)."""
        body = {"claim_id": self.next_id(), "namespace": "team-a", **fields}
        body = {k: v for k, v in body.items() if v is not _DROP}
        text = json.dumps(body, ensure_ascii=False)
        if raw_tail:
            text = text[:-1] + ("," if len(body) else "") + raw_tail + "}"
        self.add(name, text.encode("utf-8", "surrogatepass"))

    def raw(self, name: str, template: str) -> None:
        """A payload written by hand; `{id}` is a claim id of its own."""
        self.add(name, template.replace("{id}", self.next_id()).encode("utf-8", "surrogatepass"))


_DROP = object()


def _values_for(name: str, prop: dict, rng: random.Random) -> list[tuple[str, object]]:
    """(label, value) just inside, at and just past each limit of one property, and wrong types."""
    out: list[tuple[str, object]] = [("null", None), ("true", True), ("a list", []), ("an object", {})]
    kind = prop.get("type")
    if kind in ("integer", "number"):
        low, high = prop.get("minimum", 0), prop.get("maximum", 1 << 40)
        out += [("min", low), ("max", high), ("min - 1", low - 1), ("max + 1", high + 1),
                ("max as a float", float(high)), ("max + 0.5", high + 0.5), ("as a string", str(high)),
                ("2^53 + 1", (1 << 53) + 1), ("2^64", 1 << 64), ("-2^63 - 1", -(1 << 63) - 1),
                ("1e308", 1e308), ("a fraction", 0.1 + rng.random())]
    if kind == "string" or "enum" in prop:
        choices = prop.get("enum") or []
        longest = prop.get("maxLength", 64)
        out += [("a number", 7), ("empty", ""), ("one too long", "a" * (longest + 1)),
                ("as long as allowed", "a" * longest), ("emoji as long as allowed", "😀" * longest),
                ("emoji one too long", "😀" * (longest + 1))]
        out += [(f"unicode {c!r}", f"team{c}a") for c in UNICODE]
        out += [(f"whitespace {c!r} after", "a" + c) for c in rng.sample(WHITESPACE, 4)]
        for choice in choices[:4]:
            out += [(f"{choice!r}", choice), (f"{choice!r} upper", choice.upper()),
                    (f"{choice!r} padded", f" {choice} ")]
    if kind == "array":
        enum = prop["items"].get("enum", ["x"])
        most = prop.get("maxItems", 8)
        out += [("one of each", list(enum)), ("first", enum[:1]), ("empty", []), ("a string", enum[0]),
                ("one too many", list(enum) + enum[:1]), ("twice", enum[:1] * 2), ("a number inside", [1]),
                ("nested", [enum[:1]]), ("lower case", [enum[0].lower()]), ("with a space", [enum[0] + " "])]
        assert most >= 1
    if kind == "object":
        out += [("empty", {}), ("64 entries", {f"k{i}": "v" for i in range(64)}),
                ("65 entries", {f"k{i}": "v" for i in range(65)}), ("a number value", {"k": 1}),
                ("a null value", {"k": None}), ("a nested value", {"k": {"a": "b"}}),
                ("longest key", {"k" * 253: "v"}), ("key one too long", {"k" * 254: "v"}),
                ("emoji key as long as allowed", {"😀" * 253: "v"}), ("emoji value one too long", {"k": "😀" * 257}),
                ("empty key", {"": "v"}), ("emoji value as long as allowed", {"k": "😀" * 256})]
        out += [(f"key of whitespace {c!r}", {c: "v"}) for c in WHITESPACE]
        out += [(f"key {c!r} inside", {f"zone{c}": "a"}) for c in rng.sample(UNICODE, 3)]
    return out


def _hand_written(corpus: Corpus) -> None:
    """Hostile payloads no field table makes: encodings, syntax, nesting, duplicates, size."""
    head = '{"claim_id": "{id}", "namespace": "team-a"'
    for text in ['', ' ', 'null', 'true', '42', '"a string"', '[]', '[{"claim_id": "{id}"}]', '{}',
                 head + '}  ', head + '} x', head + '}{"a": 1}', head + ',}', head + '} // a comment',
                 "{'claim_id': '{id}'}", head + ', "gpus": NaN}', head + ', "gpus": Infinity}',
                 head + ', "gpu_memory_gib": -Infinity}', head + ', "gpus": 1e999}', head + ', "gpus": -1e999}',
                 head + ', "gpus": 01}', head + ', "gpus": +1}', head + ', "gpus": 0x10}', head + ', "gpus": 1.}',
                 head + ', "gpus": .5}', head + ', "gpus": 1e2}', head + ', "gpus": 2E0}', head + ', "gpus": 20e-1}',
                 head + ', "gpus": 1.0000000000000001}', head + ', "gpus": 64.00000000000001}',
                 head + ', "gpus": 1e-400, "cpu_milli": 5}', head + ', "priority": -0}',
                 head + ', "gpus": 100000000000000000000000000000000000000}',
                 head + ', "lease_seconds": 1e-320}', head + ', "workload": "tab\tinside"}',
                 head + ', "workload": "nul \\u0000 inside"}', head + ', "workload": "\\ud83d\\ude00 a pair"}',
                 head + ', "workload": "\\ud800 alone"}', head + ', "workload": "alone \\udc00"}',
                 head + ', "labels": {"\\udfff": "v"}}', head + ', "workload": "\\uD83D\\uDE00 upper"}',
                 head + ', "workload": "escaped \\/ slash \\" quote"}', head + ', "claim_id": "{id}"}',
                 head + ', "namespace": "team-b"}', head + ', "gpus": 1, "gpus": 1}',
                 head + ', "gpus": 1, "gpus": 2}', head + ', "labels": {"a": "1", "a": "2"}}',
                 head + ', "node_selector": {"zone": "a", "zone": "a"}}', head + ', "labels": {"a": "1"}, "labels": {}}',
                 head + ', "\\u0067pus": 1, "gpus": 2}', head + ', "gp\\u0075s": 3}', head + ', "workload": "a:b", "gpus": 1}',
                 '\ufeff' + head + '}', head + '}\n', '\n\t ' + head + '}', head + ', "GPUS": 2}',
                 head + ', "gpus ": 2}', head + ', "claimId": "{id}"}']:
        corpus.raw(f"text {text[:60]!r}", text)
    for depth in (5, 64, 500, 5000):
        corpus.raw(f"nested {depth} deep in an unknown field", head + ', "x": ' + "[" * depth + "]" * depth + "}")
        corpus.raw(f"nested {depth} deep in a label", head + ', "labels": {"k": ' + '{"a": ' * depth + "1"
                   + "}" * depth + "}}")
    prefix = ('{"claim_id": "{id}", "namespace": "team-a", "workload": "').encode()
    for name, bad in [("byte ff", b"\xff"), ("a lone continuation byte", b"\x80"), ("a truncated sequence", b"\xe2\x82"),
                      ("overlong /", b"\xc0\xaf"), ("a surrogate in UTF-8", b"\xed\xa0\x80"),
                      ("beyond U+10FFFF", b"\xf4\x90\x80\x80"), ("latin-1 e-acute", b"\xe9")]:
        data = prefix.replace(b"{id}", corpus.next_id().encode()) + b"invalid " + bad + b' here"}'
        corpus.add(f"invalid UTF-8: {name}", data)
    corpus.add("UTF-16", ('{"claim_id": "' + corpus.next_id() + '", "namespace": "team-a"}').encode("utf-16"))
    corpus.claim("over the server's max payload", {"x": "w" * (MAX_PAYLOAD + 10)})
    for c in WHITESPACE:  # the serverless seed's comma-separated lists, with each kind of blank
        for field, text in (("gpuIds", f"ADA_24,{c}AMPERE_80"), ("allowedCudaVersions", f"12.4{c}")):
            seed = {"claimId": corpus.next_id(), "namespace": "team-a", field: text}
            corpus.add(f"seed {field} {text!r}", json.dumps(seed, ensure_ascii=False).encode())


def corpus(tag: str, generated: int = 120) -> list[tuple[str, bytes]]:
    """(name, payload) pairs, the same for a given tag on every run: `tag` makes the claim ids
    unique to one run of the test."""
    rng = random.Random(SEED)
    out = Corpus(tag)
    for base in BASES:
        out.claim(f"valid {base}", base)
    properties = claim_properties()
    for name, prop in properties.items():
        base = BASES[0] if name not in ("gpus", "gpu_milli", "cpu_milli") else {}
        for label, value in _values_for(name, prop, rng):
            if name == "claim_id" and isinstance(value, str):  # keep it unique: the label's value, then a tag
                value = value[:100] + out.next_id() if value else value
            out.claim(f"{name}: {label}", {**base, name: value})
        out.claim(f"{name}: left out", {**base, name: _DROP})
    _hand_written(out)
    fields = list(properties)
    for i in range(generated):  # a few fields at once, each at a value of its table
        mix = {}
        for name in rng.sample(fields, rng.randint(1, 4)):
            if name not in ("claim_id", "namespace"):
                mix[name] = rng.choice(_values_for(name, properties[name], rng))[1]
        base = rng.choice(BASES + [{}])
        out.claim(f"mixed {i}: {sorted(mix)}", {**base, **mix})
    return out.items
