"""Progress: plain lines when not a terminal, null-safe `track`, stage prefixes."""

from __future__ import annotations

import io

from suite.progress import Progress, track


def test_plain_mode_when_not_a_tty():
    out = io.StringIO()
    p = Progress(stream=out)
    assert not p.is_rich
    with p.stage("shapes"):
        p.log("hello")
        with p.task("sweep", total=8) as t:
            for _ in range(8):
                t.advance()
    p.log("after")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[shapes] hello"
    assert lines[1] == "[shapes] sweep (0/8)"
    assert lines[-2] == "[shapes] sweep done (8/8)"
    assert lines[-1] == "after"
    assert 2 <= len(lines) - 4 <= 4  # a few intermediate lines, not one per step


def test_track_without_progress_is_silent():
    assert list(track(None, range(3), "x")) == [0, 1, 2]


def test_track_with_progress_and_generators():
    out = io.StringIO()
    p = Progress(stream=out)
    assert list(track(p, (i for i in range(4)), "gen")) == [0, 1, 2, 3]
    assert list(track(p, [1, 2], "list")) == [1, 2]
    text = out.getvalue()
    assert "gen done (4)" in text and "list done (2/2)" in text


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_rich_mode_on_a_tty():
    out = FakeTTY()
    p = Progress(stream=out)
    assert p.is_rich
    p.log("visible line")
    for _ in track(p, range(5), "bar"):
        pass
    p.close()
    p.close()
    assert "visible line" in out.getvalue()
