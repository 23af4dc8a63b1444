"""The memory check before loading."""

import json

import pytest

from specmlx.errors import SpecmlxError
from specmlx import memory
from specmlx.memory import GB, check_fits


def fake_model(path, gigabytes: float, quantized: bool = False):
    path.mkdir()
    config = {"torch_dtype": "float32"} | ({"quantization": {"bits": 4}} if quantized else {})
    (path / "config.json").write_text(json.dumps(config))
    with open(path / "model.safetensors", "wb") as fh:
        fh.truncate(int(gigabytes * GB))  # sparse: costs no disk
    return path


def test_a_pair_that_fits_passes(tmp_path):
    check_fits(fake_model(tmp_path / "t", 6), fake_model(tmp_path / "d", 2), available=12 * GB)


def test_says_when_the_target_alone_would_fit(tmp_path):
    with pytest.raises(SpecmlxError, match=r"need about 8\.\d GB, but only 7\.0 GB.*target alone fits: use --drafter ngram"):
        check_fits(fake_model(tmp_path / "t", 6), fake_model(tmp_path / "d", 2), available=7 * GB)


def test_suggests_a_4bit_conversion_for_a_float32_target(tmp_path):
    with pytest.raises(SpecmlxError, match=r"4-bit conversion would need about 1\.\d GB.*-q"):
        check_fits(fake_model(tmp_path / "t", 6), None, available=3 * GB)


def test_a_quantized_target_that_does_not_fit(tmp_path):
    with pytest.raises(SpecmlxError, match="already quantized"):
        check_fits(fake_model(tmp_path / "t", 4, quantized=True), None, available=2 * GB)


def hybrid_model(path, gigabytes: float, config: dict):
    path = fake_model(path, gigabytes, quantized=True)
    (path / "config.json").write_text(json.dumps(config | {"quantization": {"bits": 4}}))
    return path


def test_a_hybrid_target_counts_its_state_and_its_mtp_layers(tmp_path):
    """Its weights (MTP layers in its files), its attention KV over the context, its recurrent state
    and what the rewind keeps: refused where the weights alone would have fitted."""
    from specmlx.memory_state import state_bytes

    from .test_memory_state import qwen_config

    config = qwen_config("bfloat16", layers=8, mtp=1)
    config["text_config"].update(hidden_size=4096, num_key_value_heads=32, head_dim=128,
                                 linear_num_value_heads=64, linear_value_head_dim=128, linear_key_head_dim=128)
    state = state_bytes(config)
    target = hybrid_model(tmp_path / "t", 2, config)
    (target / "mtp.safetensors").write_bytes(b"\0" * (64 << 20))  # the MTP layers, beside the target's weights
    assert memory.model_bytes(target) == int(2 * GB) + (64 << 20) + state > int(2 * GB) + (256 << 20)
    check_fits(target, None, available=memory.needed_bytes(memory.model_bytes(target)))
    with pytest.raises(SpecmlxError, match="already quantized"):
        check_fits(target, None, available=memory.needed_bytes(int(2 * GB) + (64 << 20)))


@pytest.mark.parametrize("nbytes, text", [(20 * GB, "20 GB"), (int(1.5 * GB), "1.5 GB"), (int(0.000999999 * GB), "1.02 MB"),
                                          (1 << 20, "1 MB"), (2048, "2 KB"), (0, "0 B")])
def test_a_size_reads_as_a_person_writes_it(nbytes, text):
    assert memory.size_text(nbytes) == text


def test_a_servers_limit_is_the_devices_recommended_set_else_what_is_held_and_most_of_what_is_free(monkeypatch):
    import mlx.core as mx

    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * GB)
    monkeypatch.setattr(mx, "get_active_memory", lambda: 3 * GB)
    monkeypatch.setattr(mx, "device_info", lambda: {"device_name": "cpu"})
    assert memory.memory_limit() == 3 * GB + int(10 * GB * memory.FREE_SHARE)
    monkeypatch.setattr(mx, "device_info", lambda: {"max_recommended_working_set_size": 21 * GB})
    assert memory.memory_limit() == 21 * GB
