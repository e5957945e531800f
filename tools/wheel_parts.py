"""Carry a folder of wheels to a machine through copies of limited size, and put them back together.

A GPU machine without network access may be reachable only through copies of at most so many MiB
each (a working tree copied per command, say), while one of FlashAttention 4's CUTLASS wheels alone
is larger. `split` cuts the folder into parts that each fit, a file larger than a part into chunks;
each part carries the manifest. On the machine, `gather` copies one part's pieces into a staging
folder, and once every piece the manifest lists is there, joins the chunks, checks each file's
SHA-256 and (with --install) installs the wheels with pip.

    python tools/wheel_parts.py split wheels/ parts/ --max-mib 40     # here
    python tools/wheel_parts.py gather parts/part-1 /tmp/wheels       # there, one call per part
    python tools/wheel_parts.py gather parts/part-2 /tmp/wheels --install
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK = ".chunk-"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pieces(path: Path, limit: int) -> list[tuple[str, int, int]]:
    """(piece name, offset, size) of one file cut into pieces of at most `limit` bytes."""
    size = path.stat().st_size
    if size <= limit:
        return [(path.name, 0, size)]
    return [(f"{path.name}{CHUNK}{i:03d}", start, min(limit, size - start))
            for i, start in enumerate(range(0, size, limit))]


def split(src: Path, out: Path, max_mib: float) -> list[Path]:
    """Parts of `src`'s files under `out` (part-1, part-2, ...), each at most `max_mib` MiB with its
    manifest, the pieces packed largest first into the first part with room."""
    limit = int(max_mib * 2**20) - 2**16  # room for the manifest
    if limit <= 0:
        raise SystemExit(f"--max-mib {max_mib} leaves no room for a piece")
    files = sorted(p for p in src.iterdir() if p.is_file())
    if not files:
        raise SystemExit(f"{src} holds no files to split")
    cut = {p: _pieces(p, limit) for p in files}
    manifest = {"files": {p.name: {"sha256": _sha256(p), "pieces": [n for n, _, _ in cut[p]]} for p in files}}
    pieces = sorted(((p, *piece) for p in files for piece in cut[p]), key=lambda t: -t[3])
    parts: list[list[tuple[Path, str, int, int]]] = []
    room: list[int] = []
    for piece in pieces:
        slot = next((i for i, left in enumerate(room) if left >= piece[3]), None)
        if slot is None:
            parts.append([])
            room.append(limit)
            slot = len(parts) - 1
        parts[slot].append(piece)
        room[slot] -= piece[3]
    folders = []
    for number, part in enumerate(parts, start=1):
        folder = out / f"part-{number}"
        folder.mkdir(parents=True, exist_ok=True)
        for path, name, start, size in part:
            with path.open("rb") as f_in, (folder / name).open("wb") as f_out:
                f_in.seek(start)
                f_out.write(f_in.read(size))
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        folders.append(folder)
    return folders


def gather(part: Path, stage: Path) -> tuple[list[Path], list[str]]:
    """Copy `part`'s pieces into `stage`; the files whole there (joined and checked), and the
    pieces still missing."""
    manifest = json.loads((part / MANIFEST).read_text())
    file_of = {p: name for name, entry in manifest["files"].items() for p in entry["pieces"]}
    stage.mkdir(parents=True, exist_ok=True)
    for piece in part.iterdir():
        name = file_of.get(piece.name, piece.name)
        joined = name != piece.name and (stage / name).exists()
        if piece.name != MANIFEST and not joined:  # a part carried again after its file was joined
            shutil.copyfile(piece, stage / piece.name)
    whole, missing = [], []
    for name, entry in sorted(manifest["files"].items()):
        target = stage / name
        absent = [p for p in entry["pieces"] if not (stage / p).exists()]
        if target.exists() and entry["pieces"] != [name] and not absent:
            target.unlink()  # a join left half-done by an earlier call
        if absent and not target.exists():
            missing += absent
            continue
        if not target.exists():
            with target.open("wb") as f_out:
                for p in entry["pieces"]:
                    with (stage / p).open("rb") as f_in:
                        shutil.copyfileobj(f_in, f_out)
            for p in entry["pieces"]:
                (stage / p).unlink()
        if _sha256(target) != entry["sha256"]:
            target.unlink()
            raise SystemExit(f"{name}: its SHA-256 does not match the manifest's; carry its parts again")
        whole.append(target)
    return whole, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cut = commands.add_parser("split", help="cut a folder of wheels into parts of at most --max-mib")
    cut.add_argument("src", type=Path)
    cut.add_argument("out", type=Path)
    cut.add_argument("--max-mib", type=float, required=True,
                     help="the most one copy carries, less what else it carries (the tree)")
    join = commands.add_parser("gather", help="copy one part into a staging folder; join what is whole")
    join.add_argument("part", type=Path)
    join.add_argument("stage", type=Path)
    join.add_argument("--install", action="store_true", help="pip install the wheels once all are whole")
    args = parser.parse_args(argv)
    if args.command == "split":
        for folder in split(args.src, args.out, args.max_mib):
            size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
            print(f"{folder}: {size:.1f} MiB")
        return 0
    whole, missing = gather(args.part, args.stage)
    if missing:
        print(f"{len(whole)} files whole; waiting for {len(missing)} pieces: {', '.join(missing)}")
        return 0
    print(f"all {len(whole)} files whole in {args.stage}")
    if args.install:
        wheels = [str(p) for p in whole if p.suffix == ".whl"]
        return subprocess.call([sys.executable, "-m", "pip", "install", "--no-deps", *wheels])
    return 0


if __name__ == "__main__":
    sys.exit(main())
