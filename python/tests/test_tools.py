"""The tools give the CLI's answers: page_hashes = `hicache-index hash`, object_keys and
Layout = `hicache-index keys`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import List

import pytest

import hicache_index as hi
from conftest import binary

MLA = {
    "enabled": True,
    "backend": "mooncake",
    "page_size": 64,
    "hicache_object_layout": {
        "pools": [{"pool": "kv", "suffixes": ["__k"], "hit_policy": "all_pages"}],
        "key_prefix": "deepseek-ai-DeepSeek-V3",
        "is_mla_backend": True,
        "pp_rank": 0,
        "pp_size": 1,
    },
}


def cli(*args: str) -> List[str]:
    out = subprocess.run([binary("hicache-index"), *args], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.parametrize(
    "tokens, page_size, extra",
    [
        (list(range(64)), 16, {}),
        (list(range(65)), 4, {"cache_salt": "tenant-a"}),
        ([7, 2**40, 2**64 - 1, 0, 5, 6], 2, {"extra_key": "lora-1"}),
        (list(range(33)), 8, {"eagle": True}),
        (list(range(20)), 5, {"cache_salt": "s", "extra_key": "k", "eagle": True}),
    ],
)
def test_page_hashes_are_the_cli_hash(tokens: List[int], page_size: int, extra: dict) -> None:
    args = ["hash", "--page-size", str(page_size)]
    if "cache_salt" in extra:
        args += ["--cache-salt", extra["cache_salt"]]
    if "extra_key" in extra:
        args += ["--extra-key", extra["extra_key"]]
    if extra.get("eagle"):
        args.append("--eagle")
    expected = cli(*args, ",".join(map(str, tokens)))
    got = [h.hex() for h in hi.page_hashes(tokens, page_size, **extra)]
    assert got == expected
    assert len(got) > 0


@pytest.mark.parametrize(
    "flags",
    [
        {"page_size": 64, "tp": 2},
        {"page_size": 64, "tp": 4, "pp": 2, "model": "Qwen/Qwen3-8B"},
        {"page_size": 16, "tp": 8, "mla": True, "tag": "blue"},
        {"page_size": 16, "tp": 2, "tag_only_prefix": True, "tag": "t"},
        {"page_size": 16, "tp": 2, "pool": ["mamba,conv=2,trailing=1", "swa,trailing=2"]},
    ],
)
def test_object_keys_are_the_cli_keys(flags: dict) -> None:
    page = hi.page_hashes(list(range(64)), 16)[1]
    args = ["keys", "--page-hash", page.hex()]
    for k, v in flags.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
        elif isinstance(v, list):
            for item in v:
                args += [flag, item]
        else:
            args += [flag, str(v)]
    expected = cli(*args)
    assert hi.object_keys(page, **flags) == expected
    assert hi.Layout(**flags).object_keys(page.hex()) == expected
    assert len(expected) >= 1


def test_layout_from_sglang_is_the_cli_keys_of_the_document(tmp_path: Path) -> None:
    path = tmp_path / "layout.json"
    path.write_text(json.dumps(MLA))
    page = "ab" * 32
    expected = cli("keys", "--page-hash", page, "--layout", str(path))
    layout = hi.Layout.from_sglang(MLA)
    assert layout.object_keys(page) == expected == ["deepseek-ai-DeepSeek-V3_" + page + "__k"]
    assert hi.Layout.from_sglang(json.dumps(MLA)) == layout
    assert hi.Layout(layout=path) == layout
    assert layout.page_size == 64


def test_bad_tool_input_is_a_value_error_with_the_cli_message() -> None:
    with pytest.raises(ValueError, match="--page-size must be at least 1"):
        hi.page_hashes([1, 2], 0)
    with pytest.raises(ValueError, match="is not a token id"):
        hi.page_hashes([1, -2], 1)
    with pytest.raises(ValueError, match="--page-hash must be 64 lowercase hex"):
        hi.object_keys("xyz", page_size=1, tp=1)
    with pytest.raises(ValueError, match="--page-size is required"):
        hi.Layout(tp=1)
    with pytest.raises(ValueError, match="invalid layout"):
        hi.Layout(page_size=0, tp=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'pagesize'"):
        hi.Layout(pagesize=1, tp=1)
