import json

import pandas as pd
import pytest

from suite.data.manifest import ManifestError, read_manifest


def test_csv_reads_and_computes_tokens(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("height,width,frames,path\n480,832,81,a.mp4\n720,1280,1,b.jpg\n")
    df = read_manifest(p)
    assert df["tokens"].tolist() == [32_760, 3_600]
    assert "path" in df.columns


def test_csv_bad_row_names_file_and_line(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("height,width,frames\n480,832,81\n480,832,81\n720,1281,1\n")
    with pytest.raises(ManifestError, match=r"m\.csv:4: .*multiples of 16"):
        read_manifest(p)


def test_csv_non_integer_names_column_and_line(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("height,width,frames\n480,832,abc\n")
    with pytest.raises(ManifestError, match=r"m\.csv:2: column 'frames' must be an integer"):
        read_manifest(p)


def test_jsonl_bad_json_and_bad_frames(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps({"height": 480, "width": 832, "frames": 81}) + "\n\n{oops\n")
    with pytest.raises(ManifestError, match=r"m\.jsonl:3: not valid JSON"):
        read_manifest(p)
    p.write_text(json.dumps({"height": 480, "width": 832, "frames": 80}) + "\n")
    with pytest.raises(ManifestError, match=r"m\.jsonl:1: frames must be 1 \+ 4k"):
        read_manifest(p)


def test_parquet_and_missing_frames_means_images(tmp_path):
    pytest.importorskip("pyarrow")
    p = tmp_path / "m.parquet"
    pd.DataFrame({"height": [480, 720], "width": [832, 1280]}).to_parquet(p)
    df = read_manifest(p)
    assert df["frames"].tolist() == [1, 1] and df["tokens"].tolist() == [1_560, 3_600]


def test_missing_column_and_unknown_format(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("h,w\n480,832\n")
    with pytest.raises(ManifestError, match="missing column"):
        read_manifest(p)
    q = tmp_path / "m.txt"
    q.write_text("x")
    with pytest.raises(ManifestError, match="accepted: .csv"):
        read_manifest(q)
    with pytest.raises(ManifestError, match="no such manifest"):
        read_manifest(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    "name,text,match",
    [
        ("empty.csv", "", r"empty\.csv: the manifest is empty"),
        ("header.csv", "height,width,frames\n", r"header\.csv: the manifest has no rows"),
        ("blank.jsonl", "\n\n", r"blank\.jsonl: the manifest has no rows"),
        ("ragged.csv", "height,width\n480,832\n480,832,81\n",
         r"ragged\.csv:3: 3 fields, the header has 2"),
        # one field too many in every row: refused, never shifted under the header
        ("shifted.csv", "height,width,frames\n5,480,832,81\n", r"shifted\.csv:2: 4 fields"),
        ("short.csv", "height,width,frames\n480,832,81\n480,832\n", r"short\.csv:3: 2 fields"),
        ("quote.csv", 'height,width,frames\n480,832,81\n"480,832,81\n',
         r"quote\.csv:3: not valid CSV"),
        ("twice.csv", "height,width,height\n480,832,480\n", r"twice\.csv:1: .*'height'"),
        ("bool.jsonl", '{"height": 480, "width": 832, "frames": true}\n',
         r"bool\.jsonl:1: column 'frames' must be an integer"),
        ("bytes.csv", b"height,width\n\xff\xfe,1\n", r"bytes\.csv: cannot read"),
        ("cols.csv", "h,w\n480,832\n", r"cols\.csv: missing column"),
        ("bad.parquet", "not parquet", r"bad\.parquet: (cannot read|reading Parquet needs)"),
        ("nan.jsonl", '{"height": 480, "width": 832, "frames": 81}\n{"height": 480, "width": 832}\n',
         r"nan\.jsonl:2: column 'frames' must be an integer"),
    ],
)  # fmt: skip
def test_every_error_names_the_file(tmp_path, name, text, match):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ManifestError, match=match):
        read_manifest(p)


def test_a_directory_is_not_a_manifest(tmp_path):
    with pytest.raises(ManifestError, match="no such manifest file"):
        read_manifest(tmp_path)


def test_missing_frames_is_read_as_images_with_a_note(tmp_path):
    p = tmp_path / "imgs.csv"
    p.write_text("height,width\n480,832\n720,1280\n")
    notes = []
    df = read_manifest(p, note=notes.append)
    assert df["frames"].tolist() == [1, 1]
    assert (
        len(notes) == 1 and "imgs.csv has no 'frames' column" in notes[0] and "2 rows" in notes[0]
    )
    q = tmp_path / "vids.csv"
    q.write_text("height,width,frames\n480,832,81\n")
    read_manifest(q, note=notes.append)
    assert len(notes) == 1  # no note when frames is there


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "pyarrow" else find(n, *a)
    )
    p = tmp_path / "m.parquet"
    p.write_bytes(b"PAR1")
    with pytest.raises(
        ManifestError, match=r"m\.parquet: .*pip install 'adaptiveload-suite\[parquet\]'"
    ):
        read_manifest(p)


def test_a_sample_above_the_memory_budget_is_refused_by_line(tmp_path):
    p = tmp_path / "big.csv"
    p.write_text("height,width,frames\n480,832,81\n\n4096,4096,81\n")
    assert len(read_manifest(p, max_tokens=2e6)) == 2
    with pytest.raises(ManifestError, match=r"big\.csv:4: a 4096x4096x81 sample is 1,376,256 "):
        read_manifest(p, max_tokens=712_000)


def test_blank_lines_keep_line_numbers(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("height,width,frames\n\n480,832,81\n\n480,832,80\n")
    with pytest.raises(ManifestError, match=r"m\.csv:5: frames must be 1 \+ 4k"):
        read_manifest(p)
