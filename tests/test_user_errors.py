"""What a user sees when something is wrong on the command lines (``python -m zoo``, ``python -m zoo.judges``):
one line per error, printed once, saying what to do next; never a traceback."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from zoo.cli import main as zoo_main  # noqa: E402
from zoo.judges import cli as judges_cli  # noqa: E402


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["example:group", "--methods", ""], "give at least one method"),
        (["no_such_photo.jpg"], "give the path of a photo, or example:group"),
        (["example:nope"], "available: "),
        (["example:group", "--key", ""], "must not be empty"),
        (["example:group", "--judge", "nope"], "unknown judge 'nope'; choose from"),
        ([__file__], "not a readable image"),
    ],
)
def test_judges_cli_usage_errors_are_one_line(argv, expected, capsys):
    rc = judges_cli.main(argv)
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    (line,) = _lines(out.err)
    assert line.startswith("error: ") and expected in line, line


@pytest.mark.slow  # end to end through every method or a subprocess (CI runs it with -m slow)
def test_judges_cli_measures_the_rest_when_a_method_fails(capsys):
    """``--methods dbaf,blur`` once ended in a traceback; an unknown method is one line and exit status 1."""
    rc = judges_cli.main(["example:group", "--methods", "dbaf,blur,nosuch", "--judge", "sface"])
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert rc == 1
    assert set(report["methods"]) == {"dbaf", "blur", "nosuch"} and report["faces"] >= 1
    for name in ("dbaf", "blur"):
        assert len(report["methods"][name]["distance"]) == report["faces"], name
    assert "unknown method" in report["methods"]["nosuch"]["error"]
    (line,) = [x for x in _lines(out.err) if x.startswith("error:")]
    assert line.startswith("error: nosuch: unknown method 'nosuch'; available: ") and "Traceback" not in out.err


def test_zoo_cli_prints_each_error_once(tmp_path, capsys):
    bad = tmp_path / "notes.png"
    bad.write_text("not a picture\n" * 10)
    rc = zoo_main(["anonymize", str(bad), "example:group", "-m", "blur,nosuch", "-q", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert err.count("unknown method 'nosuch'") == 1, err
    assert err.count("not a readable image") == 1, err
    assert "1 of 4 file(s) written" in err and "2 failure(s) (shown above" in err


def test_zoo_cli_error_says_what_to_do_next(tmp_path, capsys):
    bad = tmp_path / "notes.png"
    bad.write_text("not a picture\n" * 10)
    rc = zoo_main(["anonymize", str(bad), "-m", "blur", "-q", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    (line,) = [x for x in _lines(err) if x.startswith("error:")]
    assert rc == 1 and "InvalidImageError" not in line and line.count(str(bad)) == 1
    assert "give a photo" in line
