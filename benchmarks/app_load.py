"""The app under load: are bad uploads answered at once while the methods are busy, and do originals leak?

    python -m benchmarks.app_load                       # 20 concurrent anonymize requests (personal + blur)
    python -m benchmarks.app_load --requests 20 --methods personal,blur --bad-rounds 3

Starts ``space_app`` on localhost (offline), sends ``--requests`` anonymize requests at once through
``gradio_client``, and while they are running sends bad requests (a text file named .png, a PNG whose header
claims 30000 x 30000 pixels, an empty file, no method chosen, an upload over the size limit straight to the
upload route), timing each answer. Afterwards every download (gallery images and zips) is compared with the
original photo, and every file in the app's private folders is checked for group/other permissions.
Writes ``benchmarks/results/app_load_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import socket
import stat
import struct
import sys
import tempfile
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _space_app():
    """The app module, from the repository root (it is a script, not an installed package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("space_app", Path(__file__).resolve().parent.parent / "space_app.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["space_app"] = module
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _png_header_only(path: Path, width: int, height: int) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b""))
    return path


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _downloads_holding(original: np.ndarray, result) -> tuple[int, int]:
    """(files checked, files equal to the original) among one anonymize answer's gallery images and zip."""
    gallery, _table, zip_path, _status = result
    checked = same = 0
    for item in gallery:
        checked += 1
        same += int(np.array_equal(_pixels(Path(item["image"]).read_bytes()), original))
    with zipfile.ZipFile(zip_path) as zf:
        for name in zf.namelist():
            checked += 1
            if "original" in name:
                same += 1
            elif name.endswith(".png"):
                same += int(np.array_equal(_pixels(zf.read(name)), original))
    return checked, same


def _exposed(folder: Path) -> list[str]:
    """Files or folders under ``folder`` (and itself) that another user could reach: the top folder not 0700,
    or any file with group/other permission bits set."""
    bad = []
    if stat.S_IMODE(folder.stat().st_mode) != 0o700:
        bad.append(f"{folder} {oct(stat.S_IMODE(folder.stat().st_mode))}")
    for p in folder.rglob("*"):
        if p.is_file() and stat.S_IMODE(p.stat().st_mode) & 0o077:
            bad.append(f"{p} {oct(stat.S_IMODE(p.stat().st_mode))}")
    return bad


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20, help="concurrent anonymize requests")
    ap.add_argument("--methods", default="personal,blur")
    ap.add_argument("--bad-rounds", type=int, default=3, help="rounds of the five bad requests during the load")
    ap.add_argument("--max-upload", default="2mb")
    ap.add_argument("--out", default=str(RESULTS / "app_load_cpu"))
    args = ap.parse_args(argv)

    import httpx
    from gradio_client import Client, handle_file

    space_app = _space_app()

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    catalog = space_app.method_catalog(methods, checkpoints="")
    missing = [m for m in methods if not catalog[m].available]
    if missing:
        raise SystemExit(f"error: not available here: {', '.join(missing)}")
    demo = space_app.build_app(catalog)
    _, url, _ = space_app.launch(demo, server_port=_free_port(), server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, max_file_size=args.max_upload)
    photo = Path(next(p for p in space_app.example_photos() if Path(p).stem == "astronaut"))
    original = np.asarray(Image.open(photo).convert("RGB"))
    work = Path(tempfile.mkdtemp(prefix="app_load_"))
    text = work / "notes.png"
    text.write_text("this is a text file, not a picture\n" * 20)
    huge = _png_header_only(work / "huge.png", 30000, 30000)
    empty = work / "empty.png"
    empty.write_bytes(b"")
    big = work / "big.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (1100, 1100, 3), dtype=np.uint8)).save(big)

    client = Client(url, verbose=False, download_files=True)
    key = "load test key"

    def anonymize(path: Path, chosen=methods):
        t0 = time.perf_counter()
        try:
            out = client.submit(handle_file(str(path)), chosen, key, "sface", api_name="/anonymize").result(timeout=600)
            return time.perf_counter() - t0, out, None
        except Exception as err:  # noqa: BLE001 - a refusal is the expected answer for a bad request
            return time.perf_counter() - t0, None, " ".join(str(err).split())[:200]

    def upload_too_big():
        t0 = time.perf_counter()
        with open(big, "rb") as f:
            r = httpx.post(url.rstrip("/") + "/gradio_api/upload", files={"files": ("big.png", f, "image/png")}, timeout=60)
        return time.perf_counter() - t0, None, f"HTTP {r.status_code}: {r.text[:120]}"

    bad_cases = {
        "text file named .png": lambda: anonymize(text),
        "PNG header claiming 30000x30000": lambda: anonymize(huge),
        "empty file": lambda: anonymize(empty),
        "no method chosen": lambda: anonymize(photo, []),
        f"upload over {args.max_upload}": upload_too_big,
    }
    t_start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.requests) as pool:
        good = [pool.submit(anonymize, photo) for _ in range(args.requests)]
        time.sleep(1.5)  # every slot is busy and the rest are waiting
        bad = []
        for r in range(args.bad_rounds):
            for label, fn in bad_cases.items():
                running = sum(not g.done() for g in good)
                seconds, out, err = fn()
                bad.append(
                    {
                        "case": label,
                        "round": r,
                        "seconds": round(seconds, 3),
                        "answer": err,
                        "refused": out is None and err is not None,
                        "good_requests_pending": running,
                    }
                )
        good = [g.result() for g in good]
    wall = time.perf_counter() - t_start

    ok = [g for g in good if g[1] is not None]
    checked = same = 0
    for _s, out, _e in ok:
        c, s = _downloads_holding(original, out)
        checked, same = checked + c, same + s
    exposed = _exposed(space_app.gradio_temp_dir()) + _exposed(space_app.app_dir())
    world_readable_originals = [p for p in exposed if Path(p.split(" ")[0]).is_file() and Path(p.split(" ")[0]).suffix.lower() in (".png", ".jpg", ".jpeg")]
    demo.close()

    during = [b for b in bad if b["good_requests_pending"] > 0]
    lat = sorted(g[0] for g in ok)
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}",
        "python": sys.version.split()[0],
        "methods": methods,
        "concurrent_requests": args.requests,
        "slots": space_app.SLOTS.limit,
        "good_requests_ok": len(ok),
        "good_latency_s": {"median": round(lat[len(lat) // 2], 2), "max": round(lat[-1], 2)} if lat else None,
        "wall_s": round(wall, 1),
        "bad_requests": bad,
        "bad_answered_during_load": len(during),
        "bad_refused": sum(b["refused"] for b in bad),
        "bad_under_1s": sum(b["refused"] and b["seconds"] < 1.0 for b in bad),
        "bad_max_s": max(b["seconds"] for b in bad),
        "download_files_checked": checked,
        "download_files_equal_to_original": same,
        "files_reachable_by_other_users": exposed,
        "world_readable_originals": world_readable_originals,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# The app under load (benchmarks/app_load.py)",
        "",
        f"`python -m benchmarks.app_load --requests {args.requests} --methods {args.methods} --bad-rounds {args.bad_rounds}`"
        f" on {result['machine']}; {result['slots']} slots for the methods.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| concurrent anonymize requests (astronaut, {', '.join(methods)}) | {args.requests}; {len(ok)} answered with results |",
        f"| their latency, median / max | {result['good_latency_s']['median']} s / {result['good_latency_s']['max']} s |" if lat else "| latency | - |",
        f"| bad requests sent while good ones were pending | {len(during)} of {len(bad)} |",
        f"| bad requests refused with a readable message | {result['bad_refused']} of {len(bad)} |",
        f"| bad requests answered in < 1 s | {result['bad_under_1s']} of {len(bad)} (slowest {result['bad_max_s']:.3f} s) |",
        f"| download files (gallery + zip members) equal to the original | {same} of {checked} |",
        f"| app files another user could read | {len(exposed)} |",
        "",
        "| bad request | round | seconds | good requests pending | answer |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {b['case']} | {b['round']} | {b['seconds']:.3f} | {b['good_requests_pending']} | {(b['answer'] or '')[:90]} |" for b in bad]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
