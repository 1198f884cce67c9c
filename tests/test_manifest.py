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
