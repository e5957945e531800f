"""tools/wheel_parts.py: parts that fit the limit, and files put back together byte for byte."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

_TOOL = Path(__file__).parents[1] / "tools" / "wheel_parts.py"
_SPEC = importlib.util.spec_from_file_location("wheel_parts", _TOOL)
wheel_parts = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(wheel_parts)

KIB = 1 / 1024  # of a MiB


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    src = tmp_path / "wheels"
    src.mkdir()
    for name, size in (("big-1.0-py3-none-any.whl", 300_000), ("small-1.0-py3-none-any.whl", 5_000),
                       ("mid-1.0-py3-none-any.whl", 90_000)):
        (src / name).write_bytes(os.urandom(size))
    return src


def _limit_bytes(max_mib: float) -> int:
    return int(max_mib * 2**20)


def test_every_part_fits_the_limit_and_a_large_file_is_cut_into_chunks(wheels: Path, tmp_path: Path) -> None:
    max_mib = 192 * KIB
    parts = wheel_parts.split(wheels, tmp_path / "parts", max_mib)
    assert len(parts) >= 3  # 395 kB do not fit in two parts of 192 KiB less the manifest's room
    for part in parts:
        assert sum(p.stat().st_size for p in part.iterdir()) <= _limit_bytes(max_mib)
    manifest = json.loads((parts[0] / wheel_parts.MANIFEST).read_text())
    assert len(manifest["files"]["big-1.0-py3-none-any.whl"]["pieces"]) == 3
    assert manifest["files"]["small-1.0-py3-none-any.whl"]["pieces"] == ["small-1.0-py3-none-any.whl"]


def test_gathering_the_parts_in_any_order_gives_the_files_back(wheels: Path, tmp_path: Path) -> None:
    parts = wheel_parts.split(wheels, tmp_path / "parts", 192 * KIB)
    stage = tmp_path / "stage"
    for part in reversed(parts[1:]):
        whole, missing = wheel_parts.gather(part, stage)
        assert missing  # the first part's pieces are still to come
    whole, missing = wheel_parts.gather(parts[0], stage)
    assert missing == []
    assert sorted(p.name for p in whole) == sorted(p.name for p in wheels.iterdir())
    for path in whole:
        assert path.read_bytes() == (wheels / path.name).read_bytes()
    names = sorted(p.name for p in wheels.iterdir())
    assert sorted(p.name for p in stage.iterdir()) == names  # no chunks left
    again, _ = wheel_parts.gather(parts[0], stage)  # a part carried twice changes nothing
    assert all(p.read_bytes() == (wheels / p.name).read_bytes() for p in again)
    assert sorted(p.name for p in stage.iterdir()) == names


def test_a_damaged_chunk_is_refused_by_its_checksum(wheels: Path, tmp_path: Path) -> None:
    parts = wheel_parts.split(wheels, tmp_path / "parts", 192 * KIB)
    chunk = next(p for part in parts for p in part.iterdir() if wheel_parts.CHUNK in p.name)
    data = bytearray(chunk.read_bytes())
    data[0] ^= 0xFF
    chunk.write_bytes(bytes(data))
    stage = tmp_path / "stage"
    with pytest.raises(SystemExit, match="big-1.0-py3-none-any.whl: its SHA-256 does not match"):
        for part in parts:
            wheel_parts.gather(part, stage)
    assert not (stage / "big-1.0-py3-none-any.whl").exists()


def test_a_limit_too_small_for_any_piece_is_refused(wheels: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--max-mib 0.01 leaves no room"):
        wheel_parts.split(wheels, tmp_path / "parts", 0.01)


def test_the_command_line_says_what_it_still_waits_for(wheels: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert wheel_parts.main(["split", str(wheels), str(tmp_path / "parts"), "--max-mib", str(192 * KIB)]) == 0
    assert "part-1: " in capsys.readouterr().out
    assert wheel_parts.main(["gather", str(tmp_path / "parts" / "part-2"), str(tmp_path / "stage")]) == 0
    assert "waiting for" in capsys.readouterr().out
