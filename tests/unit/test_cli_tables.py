"""CLI tables off a terminal: piped output keeps every cell whole instead of rich's 80-column squeeze."""
from gpuledger_cli import claims

REASON = "no node of the fleet could take it even empty: 4 nodes lack 64 x GPU; 1 node has no GPU devices"


def _claim(claim_id: str, **extra) -> dict:
    return {"claim_id": claim_id, "namespace": "team-research", "status": "pending", "shape": "64 x GPU",
            "submitted_at": 0, **extra}


def test_piped_claim_list_keeps_namespace_and_reason_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what a shell (or pytest-xdist) exports: the terminal's width
    claims._table([_claim("train-42", reasons=[{"message": REASON}]), _claim("b")])
    out = capsys.readouterr().out
    assert "team-research" in out
    assert REASON in out
    assert "…" not in out


def test_a_wider_columns_widens_the_piped_table(capsys, monkeypatch):
    long_reason = REASON * 3  # about 290 characters: wrapped at the default piped width
    monkeypatch.setenv("COLUMNS", "400")
    claims._table([_claim("train-42", reasons=[{"message": long_reason}])])
    assert long_reason in capsys.readouterr().out
