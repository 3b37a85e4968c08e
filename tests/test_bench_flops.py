"""bench/speed.py: its FLOP count (bench/README.md) against hand-computed values, and its parser of the peers' results."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def speed(bench_script):
    return bench_script("speed")


def test_flops_of_the_default_model(speed, compose_cfg):
    E, H, h, V, S, r = 256, 512, 256, 4403, 15.0, 1.1
    flops = speed.flops_per_target_token(compose_cfg([]), 5575, V, src_per_tgt=r, mean_src_len=S)
    parts = flops["macs_forward"]
    assert parts["decoder GRU"] == 3 * H * (E + E + H)  # tied: the input feed h̃ has the embedding size
    assert parts["output layer"] == E * V
    assert parts["readout"] == 2 * H * E
    assert parts["encoder (per target token)"] == round(r * (2 * 3 * h * (E + h) + H * H))
    assert parts["attention"] == round(H * H + S * H + S * H)
    assert flops["train_flops"] == pytest.approx(6 * sum(
        [3 * H * (2 * E + H), E * V, 2 * H * E, r * (2 * 3 * h * (E + h) + H * H), H * H + 2 * S * H]), rel=1e-6)


def test_untied_model_counts_the_full_readout(speed, compose_cfg):
    cfg = compose_cfg(["model.tie_embeddings=false", "attention=dot", "decoder.style=bahdanau"])
    parts = speed.flops_per_target_token(cfg, 8000, 8000, src_per_tgt=1.0, mean_src_len=10.0)["macs_forward"]
    assert parts["output layer"] == 512 * 8000
    assert parts["readout"] == (2 * 512 + 256) * 512
    assert parts["decoder GRU"] == 3 * 512 * (256 + 512 + 512)  # Bahdanau: the GRU reads [E y; c_t]
    assert parts["attention"] == 2 * 10 * 512


def test_luong_without_input_feeding_counts_no_feed_input(speed, compose_cfg):
    parts = speed.flops_per_target_token(compose_cfg(["decoder.input_feeding=false"]), 5575, 4403,
                                         src_per_tgt=1.0, mean_src_len=10.0)["macs_forward"]
    assert parts["decoder GRU"] == 3 * 512 * (256 + 512)  # the GRU reads E y_{t-1} only
    assert parts["readout"] == 2 * 512 * 256


def test_conditional_gru_counts_its_second_transition(speed, compose_cfg):
    parts = speed.flops_per_target_token(compose_cfg(["decoder.style=conditional"]), 5575, 4403,
                                         src_per_tgt=1.0, mean_src_len=10.0)["macs_forward"]
    assert parts["decoder GRU"] == 3 * 512 * (256 + 512) + 3 * 512 * (512 + 512)  # GRU_1(E y), GRU_2(c_t, s'_t)
    assert parts["readout"] == (2 * 512 + 256) * 256  # tied: W_o [s_t; c_t; E y] -> E


def test_peer_results_are_parsed_from_the_peer_scripts_files(speed, tmp_path):
    """The formats written by ../shared/bench/peers (throughput.py, run.sh eval, /usr/bin/time -v)."""
    (tmp_path / "throughput.txt").write_text(
        "opennmt: 21 progress lines, last step 1050\n"
        "         steady 50-350: tgt     905 tok/s | src+tgt    1781 tok/s |  1.04 steps/s | load1 2.39\n"
        "        all steps > 50: tgt     933 tok/s | src+tgt    1828 tok/s |  0.99 steps/s | load1 2.24\n")
    (tmp_path / "eval.txt").write_text(
        "checkpoint: /tmp/peers/opennmt/run/model_step_1000.pt\n"
        "beam1 decode: Total translation time (s): 11.4 => 87.72 sent/s\n"
        "beam5 decode: Total translation time (s): 27.4 => 36.50 sent/s\n")
    (tmp_path / "train.time").write_text("\tMaximum resident set size (kbytes): 1531284\n")
    found = speed.parse_peer_results(tmp_path)
    assert found["train_tgt_tokens_per_sec"] == 905
    assert (found["test_greedy_sent_per_sec"], found["test_beam5_sent_per_sec"]) == (87.72, 36.50)
    assert found["peak_rss_train_gb"] == pytest.approx(1531284 / 1024**2)


def test_peer_results_decode_only_ignores_the_earlier_training_files(speed, tmp_path):
    """--decode-only reads the peer's eval.txt alone: its training files are from an earlier round."""
    (tmp_path / "throughput.txt").write_text("         steady 50-350: tgt     914 tok/s | src+tgt    1798 tok/s\n")
    (tmp_path / "train.time").write_text("\tMaximum resident set size (kbytes): 1549652\n")
    (tmp_path / "eval.txt").write_text("checkpoint: run/model_step_400.pt\n"
                                       "beam1 decode: Total translation time (s): 9.3 => 107.53 sent/s\n"
                                       "beam5 decode: Total translation time (s): 22.2 => 45.05 sent/s\n")
    full = speed.parse_peer_results(tmp_path)
    assert full["train_tgt_tokens_per_sec"] == 914.0
    assert full["peak_rss_train_gb"] == pytest.approx(1549652 / 1024**2)
    assert (full["test_greedy_sent_per_sec"], full["test_beam5_sent_per_sec"]) == (107.53, 45.05)
    decode = speed.parse_peer_results(tmp_path, decode_only=True)
    assert "train_tgt_tokens_per_sec" not in decode and "peak_rss_train_gb" not in decode
    assert (decode["test_greedy_sent_per_sec"], decode["test_beam5_sent_per_sec"]) == (107.53, 45.05)
