"""Every config option composes and instantiates (design.md §4.10); Hydra refuses what does not exist."""

from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import instantiate

from nmt.models.attention import Additive, Attention, Dot, General, LocalP
from nmt.models.biases import Biased
from nmt.models.build import build_model
from nmt.models.multihead import MultiHead
from nmt.models.positional import LocalM, Location
from nmt.settings import TRAIN_PATHS, absolute_paths
from nmt.training.checks import check_settings

CONF = Path(__file__).resolve().parent.parent / "conf"
ATTENTIONS = sorted(p.stem for p in (CONF / "attention").glob("*.yaml"))
DECODES = sorted(p.stem for p in (CONF / "decode").glob("*.yaml"))
DATAS = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))
STYLES = ["luong", "bahdanau", "conditional"]
SMALL = ["model.emb_size=6", "model.hidden_size=8", "tokenizer.vocab_size=40"]
CLASSES = {"additive": Additive, "additive_biased": Biased, "dot": Dot, "general": General, "local_p": LocalP,
           "local_m": LocalM, "location": Location, "multihead": MultiHead}
V_SRC, V_TGT = 23, 29


def build(cfg, src_vocab_size, tgt_vocab_size):
    """The model of a composed config (its model, decoder and attention settings)."""
    return build_model(cfg.model, cfg.decoder, cfg.attention, src_vocab_size, tgt_vocab_size)


def test_options_found():
    """The parametrizations below really cover the config tree."""
    assert ATTENTIONS == ["additive", "additive_biased", "dot", "general", "local_m", "local_p", "location",
                          "multihead"]
    assert DECODES == ["beam", "greedy"]
    assert DATAS == ["bitext", "files", "multi30k"]


def forward_shapes(model, B=3, S=5, T=4):
    src = torch.randint(4, V_SRC, (B, S))
    src_mask = torch.arange(S).unsqueeze(0) < torch.tensor([[5], [2], [1]])  # [B, S]
    tgt_in = torch.randint(4, V_TGT, (B, T))
    logits, weights = model.eval()(src, src_mask, tgt_in)
    return logits.shape, weights.shape, weights, src_mask


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_attention_and_style_instantiate(compose_cfg, attention, style):
    cfg = compose_cfg([f"attention={attention}", f"decoder.style={style}", *SMALL])
    assert cfg.attention._partial_ is True
    model = build_model(cfg.model, cfg.decoder, cfg.attention, V_SRC, V_TGT)
    attn = model.decoder.attention
    assert type(attn) is CLASSES[attention]
    assert attn.query_size == attn.key_size == 8  # keys [B, S, H] and queries [B, H]: one size by construction
    assert model.decoder.style == style
    logits_shape, weights_shape, weights, src_mask = forward_shapes(model)
    assert logits_shape == (3, 4, V_TGT) and weights_shape == (3, 4, 5)
    assert (weights[~src_mask.unsqueeze(1).expand_as(weights)] == 0).all()


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_luong_without_input_feeding_instantiates(compose_cfg, attention):
    cfg = compose_cfg([f"attention={attention}", "decoder.input_feeding=false", *SMALL])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, V_SRC, V_TGT)
    assert model.decoder.style == "luong" and model.decoder.input_feeding is False
    logits_shape, weights_shape, weights, src_mask = forward_shapes(model)
    assert logits_shape == (3, 4, V_TGT) and weights_shape == (3, 4, 5)
    assert (weights[~src_mask.unsqueeze(1).expand_as(weights)] == 0).all()
    assert compose_cfg(SMALL).decoder.input_feeding is True  # the default is Luong's input feeding
    with pytest.raises(ValueError, match="needs decoder.style=luong"):
        build(compose_cfg(["decoder.style=bahdanau", "decoder.input_feeding=false", *SMALL]), V_SRC, V_TGT)


@pytest.mark.parametrize("score", ["general", "dot", "additive"])
def test_local_p_scores(compose_cfg, score):
    cfg = compose_cfg(["attention=local_p", f"attention.score={score}", "attention.window=2", *SMALL])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, V_SRC, V_TGT)
    assert type(model.decoder.attention.inner) is CLASSES[score]
    assert model.decoder.attention.window == 2
    assert forward_shapes(model)[0] == (3, 4, V_TGT)


@pytest.mark.parametrize("overrides", [["model.encoder_layers=2", "model.decoder_layers=3"],
                                       ["attention=additive", "attention.hidden_size=5"],
                                       ["attention=dot", "attention.scaled=true"],
                                       ["attention=general", "attention.scaled=true"],
                                       ["model.source_word_dropout=0.2", "model.target_word_dropout=0.1"]])
def test_other_model_options(compose_cfg, overrides):
    model = build(compose_cfg([*overrides, *SMALL]), V_SRC, V_TGT)
    assert forward_shapes(model)[0] == (3, 4, V_TGT)
    if "model.decoder_layers=3" in overrides:
        assert len(model.decoder.cells) == 3 and model.encoder.rnn.num_layers == 2
    if "attention.hidden_size=5" in overrides:
        assert model.decoder.attention.v_a.in_features == 5
    if "attention.scaled=true" in overrides:
        assert model.decoder.attention.scale == pytest.approx(8**-0.5)
    if "model.source_word_dropout=0.2" in overrides:
        assert (model.encoder.word_dropout.p, model.decoder.word_dropout.p) == (0.2, 0.1)
    else:
        assert (model.encoder.word_dropout.p, model.decoder.word_dropout.p) == (0.0, 0.0)


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("config_name", ["train", "translate"])
def test_decode_options(compose_cfg, decode, config_name):
    extra = ["checkpoint=x.pt", "input=x.txt"] if config_name == "translate" else []
    cfg = compose_cfg([f"decode={decode}", *extra], config_name=config_name)
    d = cfg.decode
    assert d.beam_size == (1 if decode == "greedy" else 5)
    assert d.length_penalty >= 0 and d.max_len_a > 0 and d.max_len_b >= 1 and d.batch_size >= 1
    assert 1 <= d.n_best <= d.beam_size and d.max_src_len > 1
    assert d.coverage_penalty == 0  # off unless asked for (docs/results.md: it did not pay on Multi30k)


@pytest.mark.parametrize("data", DATAS)
def test_data_options(compose_cfg, data):
    cfg = compose_cfg([f"data={data}"])
    assert cfg.data.kind == data
    for key in ("src_lang", "tgt_lang", "train_limit", "eval_limit", "max_len", "extra_train", "normalize"):
        assert key in cfg.data


def test_translate_defaults(compose_cfg):
    cfg = compose_cfg(["checkpoint=x.pt", "input=-"], config_name="translate")
    assert cfg.output == "-" and cfg.beam_size is None and cfg.alignments is None


# --- what is refused --------------------------------------------------------------------------------------------


def test_unknown_attention_lists_options(compose_cfg):
    with pytest.raises(MissingConfigException) as info:
        compose_cfg(["attention=nonexistent"])
    message = str(info.value)
    assert "attention/nonexistent" in message
    assert all(name in message for name in ATTENTIONS)  # "Available options"


@pytest.mark.parametrize("override", ["model.hiden_size=3", "train.lr_sheduler=constant", "attention.scaled=true",
                                      "attention.window=3", "decode.beam=4", "data.srclang=en"])
def test_typo_keys_refused(compose_cfg, override):
    """Struct mode: a key that does not exist (here, or for the chosen attention) is an error, not ignored."""
    with pytest.raises(ConfigCompositionException, match="Could not override"):
        compose_cfg([override])  # default attention=additive: no `scaled`, no `window`


def test_unknown_attention_argument_reaches_constructor(compose_cfg):
    """`+key=` bypasses struct mode; the explicit-keyword constructors still refuse it (no **kwargs)."""
    cfg = compose_cfg(["+attention.windw=3", *SMALL])
    with pytest.raises(TypeError, match="windw"):
        build_model(cfg.model, cfg.decoder, cfg.attention, V_SRC, V_TGT)


def test_invalid_values_raise_clear_errors(compose_cfg):
    with pytest.raises(ValueError, match="decoder.style"):
        build(compose_cfg(["decoder.style=transformer", *SMALL]), V_SRC, V_TGT)
    with pytest.raises(ValueError, match="window"):
        build(compose_cfg(["attention=local_p", "attention.window=0", *SMALL]), V_SRC, V_TGT)
    with pytest.raises(ValueError, match="score"):
        build(compose_cfg(["attention=local_p", "attention.score=cosine", *SMALL]), V_SRC, V_TGT)


def test_dot_sizes(compose_cfg):
    """Dot attention needs query size == key size. The encoder gives keys of the decoder's size H (two
    directions of H/2) for any emb_size and layer counts, so through the config the one size that can be wrong
    is an odd H; a factory called with two different sizes gets Dot's own error."""
    ok = compose_cfg(["attention=dot", "model.emb_size=5", "model.hidden_size=12", "model.decoder_layers=2"])
    attn = build_model(ok.model, ok.decoder, ok.attention, V_SRC, V_TGT).decoder.attention
    assert attn.query_size == attn.key_size == 12
    with pytest.raises(ValueError, match="hidden_size must be even"):
        build(compose_cfg(["attention=dot", "model.hidden_size=7"]), V_SRC, V_TGT)
    factory = instantiate(ok.attention)
    assert isinstance(factory(query_size=6, key_size=6), Dot)
    with pytest.raises(ValueError, match="query_size == key_size.*6 and 4.*general"):
        factory(query_size=6, key_size=4)
    for name in ("general", "additive"):  # the alternatives the message names do accept different sizes
        other = instantiate(compose_cfg([f"attention={name}"]).attention)(query_size=6, key_size=4)
        assert isinstance(other, Attention)
        context, weights = other(torch.randn(2, 6), torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool))
        assert context.shape == (2, 4) and weights.shape == (2, 3)


EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def test_experiment_presets_found():
    assert {"multi30k_de_en", "multi30k_en_de", "multi30k_en_fr", "align_en_fr", "align_de_en",
            "align_ro_en"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_preset_run_folders_name_the_attention_and_decoder_style(name):
    """Runs of one preset with other attention or decoder.style overrides get folders that say which they are."""
    import yaml

    preset = yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())
    run_dir = preset.get("hydra", {}).get("run", {}).get("dir")
    if run_dir is None:
        pytest.skip(f"{name} keeps train.yaml's run folder")
    assert run_dir.endswith("_${hydra:runtime.choices.attention}_${decoder.style}"), run_dir


@pytest.mark.parametrize("name, pair, gold", [("align_en_fr", ("en", "fr"), "align_enfr_hansards"),
                                              ("align_de_en", ("de", "en"), "align_deen_bicici100")])
def test_alignment_presets(compose_cfg, multi30k_dir, name, pair, gold):
    """Normalized like the gold set, the gold sentences as extra pretokenized pairs whose files exist, the
    same number of steps for every score function; the reverse direction is two overrides away."""
    cfg = compose_cfg([f"+experiment={name}"])
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == pair
    assert cfg.data.normalize.tokenize and cfg.data.normalize.lowercase
    assert cfg.data.normalize.french_decontract == (name == "align_en_fr")
    gold_entries = [e for e in cfg.data.extra_train if e.get("pretokenized")]
    assert gold_entries and all(gold in str(p) for e in gold_entries for p in e.paths.values())
    assert all(Path(p).is_file() for e in cfg.data.extra_train for p in (e.get("paths") or {}).values())
    # trained to convergence, a fixed number of steps (not minutes): the same training on any machine
    assert cfg.train.max_steps == {"align_de_en": 6500, "align_en_fr": 4000}.get(name, 1000)
    assert cfg.train.max_minutes is None and not cfg.train.average
    dot = compose_cfg([f"+experiment={name}", "attention=dot", "decoder.style=bahdanau"])
    assert dot.train.max_steps == cfg.train.max_steps and dot.decoder.style == "bahdanau"


def test_the_joint_aligner_preset_is_align_en_fr_with_biases_and_agreement(compose_cfg):
    """align_en_fr_joint changes align_en_fr's attention, agreement and gold extraction, nothing else."""
    from omegaconf import OmegaConf

    joint = OmegaConf.to_container(compose_cfg(["+experiment=align_en_fr_joint"]))
    plain = OmegaConf.to_container(compose_cfg(["+experiment=align_en_fr"]))
    assert joint["attention"]["bias"] == {"position": True, "markov": 1, "fertility": 1}
    assert joint["train"]["agreement"] == {"weight": 1.0, "loss": "product"}
    assert joint["eval"]["gold"]["method"] == "mutual_argmax"
    for cfg in (joint, plain):
        del cfg["attention"], cfg["train"]["agreement"], cfg["eval"]["gold"]["method"]
    assert joint == plain


def test_the_annealing_preset_is_the_documented_second_stage(compose_cfg):
    """align_en_fr_anneal is align_en_fr_joint with the command line of docs/alignment.md's annealed x30 pair."""
    from omegaconf import OmegaConf

    h = "${oc.env:NMT_DATA_DIR,data}/align_enfr_hansards"
    command = ["+experiment=align_en_fr_joint", "train.init=runs/en_fr", "train.lr=0.0005",
               "train.lr_scheduler=budget", "train.lr_decay_start=0", "train.max_steps=600", "train.valid_every=200",
               (f"data.extra_train=[{{paths: {{en: '{h}/test.e.gz', fr: '{h}/test.f.gz'}}, repeat: 30, "
               f"pretokenized: true}}, {{paths: {{en: '{h}/dev.e.gz', fr: '{h}/dev.f.gz'}}, repeat: 30, "
               "pretokenized: true}]")]
    preset = compose_cfg(["+experiment=align_en_fr_anneal", "train.init=runs/en_fr"])
    command.append("requires=[train.init]")  # what the preset adds: the run refuses to start without train.init
    assert OmegaConf.to_container(preset, resolve=True) == OmegaConf.to_container(compose_cfg(command), resolve=True)
    with pytest.raises(ValueError, match=r"train.init is not set, and this preset requires it: add train.init=RUN"):
        check_settings(compose_cfg(["+experiment=align_en_fr_anneal"]))
    check_settings(preset)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_presets_compose_and_overrides_still_apply(compose_cfg, name):
    """``+experiment=NAME`` sets the language pair and recipe; later overrides win; the model builds."""
    cfg = compose_cfg([f"+experiment={name}", "attention=dot", "train.max_minutes=5"])
    if name.startswith("multi30k_"):
        src, tgt = name.split("_")[1:3]
        assert (cfg.data.kind, cfg.data.src_lang, cfg.data.tgt_lang) == ("multi30k", src, tgt)
        assert cfg.model.tie_embeddings and cfg.tokenizer.restrict_vocab and cfg.train.keep_best == 5
        assert cfg.decode.beam_size == 5
        # the recipe of the best rows: the rate decays over the last 30% of the budget, no early stopping
        t = cfg.train
        assert (t.lr_scheduler, t.lr_decay_start, t.patience, t.max_epochs) == ("budget", 0.7, None, None)
    assert cfg.attention._target_.endswith("Dot") and cfg.train.max_minutes == 5
    model = build(compose_cfg([f"+experiment={name}", *SMALL]), V_SRC, V_TGT)
    assert forward_shapes(model)[0] == (3, 4, V_TGT)


def test_the_tatoeba_preset_is_the_en_de_recipe_with_more_training_pairs(compose_cfg):
    """multi30k_en_de_tatoeba adds Tatoeba and Multi30k again as extra training data, nothing else."""
    from omegaconf import OmegaConf

    more = OmegaConf.to_container(compose_cfg(["+experiment=multi30k_en_de_tatoeba"]))
    plain = OmegaConf.to_container(compose_cfg(["+experiment=multi30k_en_de"]))
    extra = more["data"].pop("extra_train")
    assert [e.get("tsv", "").endswith("tatoeba_deu_eng/deu.txt.gz") for e in extra] == [True, False]
    assert extra[0]["columns"] == ["en", "de"] and extra[1]["repeat"] == 2
    assert extra[1]["paths"]["de"].endswith("multi30k/train.de.gz")
    assert plain["data"].pop("extra_train") == []
    assert more == plain


def test_training_paths_made_absolute(compose_cfg, tmp_path, monkeypatch):
    """Relative corpus paths are stored absolute (checkpoints keep them, and a resume reads the data from the
    checkpoint's config), including data.file and every data.extra_train file."""
    monkeypatch.chdir(tmp_path)
    cfg = compose_cfg(["data=bitext", "data.file=pairs.txt",
                       "data.extra_train=[{paths: {src: more.src, tgt: more.tgt}}, {tsv: sub/t.tsv, columns: [src, tgt]}]"])
    absolute_paths(cfg, TRAIN_PATHS)
    assert cfg.data.file == str(tmp_path / "pairs.txt")
    assert dict(cfg.data.extra_train[0].paths) == {"src": str(tmp_path / "more.src"), "tgt": str(tmp_path / "more.tgt")}
    assert cfg.data.extra_train[1].tsv == str(tmp_path / "sub" / "t.tsv")


def test_subword_sampling_settings_out_of_range_are_refused(compose_cfg, caplog):
    """tokenizer.sample_side=src (the short name of another toolkit) and a BPE-dropout probability of 1 or more
    are refused before any work; a side without sampling is warned about; unigram's alpha may exceed 1."""
    with pytest.raises(ValueError, match=r"tokenizer.sample_side=src: use both, source or target"):
        check_settings(compose_cfg(["tokenizer.sample_side=src", "tokenizer.sample_alpha=0.1"]))
    with pytest.raises(ValueError, match=r"tokenizer.sample_alpha=1.5: for BPE it is the probability of dropping"):
        check_settings(compose_cfg(["tokenizer.sample_alpha=1.5"]))
    check_settings(compose_cfg(["tokenizer.sample_alpha=1.5", "tokenizer.model_type=unigram"]))
    caplog.set_level("WARNING", logger="nmt")
    check_settings(compose_cfg(["tokenizer.sample_side=source", "tokenizer.sample_alpha=0.1"]))
    assert "does nothing" not in caplog.text
    check_settings(compose_cfg(["tokenizer.sample_side=target"]))
    assert "tokenizer.sample_side=target does nothing without tokenizer.sample_alpha > 0" in caplog.text
