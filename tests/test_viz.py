"""attnbench.viz: attention weights against a float64 reference, the maps callback (files, W&B image, failures
that never stop a run), and on two tiny real runs: the report's side-by-side figure and its W&B summary run
read back from the offline files."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import yaml

from attnbench.viz import AttentionMapLogger
from attnbench.viz.attention_maps import attention_weights, draw, module_class, probe_rows

from .conftest import REPO_ROOT, train_env


def _module(attention: str, n_layers: int = 2, vocab: int = 40, pooling: str = "mean"):
    """A small TextClassifierModule with the shipped attention config (conf/attention/<name>.yaml)."""
    torch.manual_seed(0)
    spec = yaml.safe_load((REPO_ROOT / "conf" / "attention" / f"{attention}.yaml").read_text())
    model = {"d_model": 16, "n_heads": 2, "n_layers": n_layers, "d_ff": 32, "dropout": 0.1, "pooling": pooling}
    module = module_class()(vocab_size=vocab, num_classes=2, max_length=12, pad_id=0, model=model, attention=spec,
                            optim={})
    with torch.no_grad():  # larger weights than the N(0, 0.02) init, so the maps are far from uniform
        for p in module.parameters():
            p.mul_(20.0 if p.dim() > 1 else 1.0)
    return module


def _reference_layer0(module, ids, pad, scale):
    """Layer 0's weights in float64 from the parameters: pre-LN input, q/k projections, softmax(scale·q·kᵀ)."""
    sd = {k: v.double() for k, v in module.state_dict().items()}
    m = "model."
    x = sd[m + "token_embedding.weight"][ids] + sd[m + "position_embedding.weight"][: ids.shape[1]]
    x = torch.nn.functional.layer_norm(x, (16,), sd[m + "blocks.0.attn_norm.weight"], sd[m + "blocks.0.attn_norm.bias"])
    qkv = x @ sd[m + "blocks.0.attn.qkv_proj.weight"].T + sd[m + "blocks.0.attn.qkv_proj.bias"]
    b, length, _ = ids.shape[0], ids.shape[1], None
    q, k = (qkv[..., i * 16:(i + 1) * 16].view(b, length, 2, 8).transpose(1, 2) for i in (0, 1))
    scores = scale * q @ k.transpose(-1, -2)
    scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("attention, scale", [("scaled_dot", 1 / math.sqrt(8)), ("dot", 1.0)])
def test_weights_match_a_float64_reference(attention, scale):
    module = _module(attention)
    ids = torch.tensor([[5, 7, 9, 11, 13, 0, 0], [3, 4, 5, 6, 7, 8, 9]])
    pad = ids == 0
    weights = attention_weights(module, ids, pad)
    assert len(weights) == 2 and weights[0].shape == (2, 2, 7, 7) and weights[0].dtype == torch.float32
    ref = _reference_layer0(module, ids, pad, scale)
    torch.testing.assert_close(weights[0].double(), ref, atol=2e-6, rtol=0)
    assert float(weights[0].amax()) > 0.3  # not a near-uniform map: the reference is tested where it matters
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))  # padded query rows included
        assert (w[0, :, :, 5:] == 0).all()  # padding keys get no weight
    assert module.training  # restored


def test_probe_rows_pick_the_first_rows_of_a_readable_length():
    split = [([1] * n, 0) for n in (30, 3, 8, 1, 12, 40, 9)]
    assert probe_rows(split, n=2, min_tokens=5, max_tokens=16) == [2, 4]
    assert probe_rows(split, n=4, min_tokens=5, max_tokens=10) == [1, 2, 4, 6]  # filled up by the shortest others


class _Tok:
    def id_to_token(self, i):
        return f"w{i}"


class _Split(list):
    pass


def _trainer(tmp_path, loggers=(), datamodule="default"):
    split = _Split([([5, 6, 7, 8, 9, 10], 1), ([2, 3], 0), ([11, 12, 13, 14, 15], 0)])
    dm = SimpleNamespace(splits={"test": split}, tokenizer=_Tok()) if datamodule == "default" else datamodule
    return SimpleNamespace(datamodule=dm, default_root_dir=str(tmp_path), is_global_zero=True, loggers=list(loggers),
                           global_step=7)


def test_callback_writes_the_maps_and_a_failing_wandb_never_stops_the_run(tmp_path, caplog):
    from pytorch_lightning.loggers import WandbLogger

    class BrokenWandb(WandbLogger):
        def log_image(self, *args, **kwargs):
            raise ConnectionError("W&B is down")

    module = _module("dot", n_layers=1)
    callback = AttentionMapLogger(n_sentences=2, min_tokens=5, max_tokens=16)
    with caplog.at_level(logging.WARNING):
        callback.on_test_end(_trainer(tmp_path, [BrokenWandb(offline=True, save_dir=str(tmp_path))]), module)
    assert "Attention maps not logged to W&B (ConnectionError: W&B is down)" in caplog.text
    assert (tmp_path / "attention_maps.png").stat().st_size > 5_000
    record = json.loads((tmp_path / "attention_maps.json").read_text())
    assert record["attention"] == "dot"
    assert [s["row"] for s in record["sentences"]] == [0, 2]  # rows of 5..16 tokens
    assert record["sentences"][0]["tokens"] == ["w5", "w6", "w7", "w8", "w9", "w10"]
    ids = torch.tensor([[11, 12, 13, 14, 15]])
    expected = attention_weights(module, ids, torch.zeros_like(ids, dtype=torch.bool))[0][0]
    assert torch.tensor(record["weights"][1][0]) == pytest.approx(expected, abs=5.1e-5)  # rounded to 1e-4
    # once per run: a second test loop draws nothing
    (tmp_path / "attention_maps.png").unlink()
    callback.on_test_end(_trainer(tmp_path), module)
    assert not (tmp_path / "attention_maps.png").exists()


def test_callback_failure_is_one_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        AttentionMapLogger().on_test_end(_trainer(tmp_path, datamodule=None), _module("dot", n_layers=1))
    assert "Attention maps not drawn (RuntimeError: the trainer has no datamodule" in caplog.text
    with pytest.raises(ValueError, match="callbacks.attention_maps"):
        AttentionMapLogger(min_tokens=8, max_tokens=4)


def test_figure_rows_columns_and_token_axes():
    weights = [torch.rand(2, 4, 4).softmax(-1) for _ in range(2)]
    fig = draw([("dot", weights, list("abcd")), ("additive", weights, list("abcd"))], "title")
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2 * 2 * 2  # rows x (layers x heads)
    first = heatmaps[0]
    assert [t.get_text() for t in first.get_yticklabels()] == list("abcd")
    assert [t.get_text() for t in first.get_xticklabels()] == list("abcd")
    assert first.get_ylabel() == "dot" and heatmaps[4].get_ylabel() == "additive"
    assert first.images[0].get_clim() == (0.0, 1.0)
    assert [ax.get_title() for ax in heatmaps[:4]] == ["layer 0 head 0", "layer 0 head 1", "layer 1 head 0",
                                                       "layer 1 head 1"]


# --------------------------------------------------------------------------- two tiny real runs


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory, data_dir, cache_dir):
    """scaled_dot and dot, 4 steps on 64 SST-2 rows (model=tiny), W&B offline: a folder of single runs."""
    root = tmp_path_factory.mktemp("viz") / "runs"
    for attention in ("scaled_dot", "dot"):
        proc = subprocess.run(
            [sys.executable, "train.py", f"attention={attention}", "model=tiny", "trainer.max_steps=4",
             "data.max_train_samples=64", "data.max_eval_samples=64", "callbacks.run_stats.warmup_steps=1",
             "trainer.enable_progress_bar=false", f"hydra.run.dir={root / attention}"],
            cwd=REPO_ROOT, env=train_env(data_dir, cache_dir), capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def _leet_summary(run_dir: Path) -> dict:
    proc = subprocess.run(["wandb", "leet", "inspect", "--summary", "--json", str(run_dir)], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_each_run_logs_its_maps_to_wandb(tiny_runs):
    for attention in ("scaled_dot", "dot"):
        run = tiny_runs / attention
        metrics = json.loads((run / "metrics.json").read_text())
        assert (run / "attention_maps.png").stat().st_size > 5_000
        summary = _leet_summary(Path(metrics["wandb_run_dir"]))["summary"]
        image = summary["attention_maps"]
        assert image["_type"] == "images/separated" and image["count"] == 1
        assert (Path(metrics["wandb_run_dir"]) / "files" / image["filenames"][0]).stat().st_size > 5_000


@pytest.mark.slow
def test_report_draws_the_runs_side_by_side_and_logs_a_summary_run(tiny_runs, tmp_path, monkeypatch):
    import attnbench.viz.attention_maps as maps_module

    # the disturbed-run rule off: a shared core would leave these runs' rates (and so the pareto plot) out,
    # which tests/test_disturbed_runs.py pins; this test is about what is drawn and logged
    monkeypatch.setattr("attnbench.analysis.stats.MIN_CPU_SHARE", 0.0)

    from attnbench.analysis import report

    out = tmp_path / "report"
    drawn = []
    original = maps_module.draw
    monkeypatch.setattr(maps_module, "draw", lambda rows, *a, **kw: drawn.append((rows, original(rows, *a, **kw)))
                        or drawn[-1][1])
    assert report.main([str(tiny_runs), "--out", str(out), "--wandb"]) == 0
    # each heatmap of the report's figures is its run's (row label), sentence's (figure) and head's (column)
    # float64 reference weights from the run's best checkpoint (tolerance as in
    # test_each_heatmap_shows_its_own_layer_and_head)
    assert len(drawn) >= 1
    for s, (rows, fig) in enumerate(drawn):
        heatmaps = [ax for ax in fig.axes if ax.images]
        assert len(heatmaps) == len(rows) * 2  # model=tiny: one layer, two heads
        for r, (label, _, _) in enumerate(rows):
            run_dir = tiny_runs / label.split()[0]
            ids = json.loads((run_dir / "attention_maps.json").read_text())["sentences"][s]["ids"]
            model = maps_module.load_model(maps_module.best_checkpoint(run_dir))
            reference = _reference_maps(model, torch.tensor([ids]))
            for head in range(2):
                image = torch.as_tensor(heatmaps[2 * r + head].images[0].get_array().data, dtype=torch.float64)
                torch.testing.assert_close(image, reference[0][head], atol=1e-4, rtol=0, msg=f"{label} head {head}")
    markdown = (out / "report.md").read_text()
    assert "## Attention maps" in markdown and "![attention_maps_s1.png](attention_maps_s1.png)" in markdown
    assert (out / "attention_maps_s1.png").stat().st_size > 10_000
    # the same sentence for both score functions: the one each run's callback drew first
    probe = [json.loads((tiny_runs / a / "attention_maps.json").read_text())["sentences"][0] for a in ("scaled_dot", "dot")]
    assert probe[0] == probe[1]

    # the summary run, read back from its offline files
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    leet = _leet_summary(run_dir)
    assert leet["state"] == "finished" and leet["summary"]["report/jobs_finished"] == 2
    records = subprocess.run(["wandb", "leet", "inspect", "--json", str(run_dir)], capture_output=True, text=True,
                             timeout=120, check=True).stdout
    assert '"job_type":"report"' in records.replace(" ", "")
    ref = leet["summary"]["report/variants"]
    assert ref["_type"] == "table-file"
    logged = json.loads((run_dir / "files" / ref["path"]).read_text())
    table = pd.DataFrame(logged["data"], columns=logged["columns"]).set_index("attention")
    csv = pd.read_csv(out / "report.csv").set_index("attention")
    assert sorted(table.index) == sorted(csv.index) == ["dot", "scaled_dot"]
    for column in ("acc_mean", "n", "train_tok_s", "test_tok_s", "peak_mem_mb", "params"):
        # (a rate is NaN on both sides when a shared core left every run out of it: tests/test_disturbed_runs.py)
        assert table[column].astype(float).to_dict() == pytest.approx(csv[column].astype(float).to_dict(), rel=1e-12,
                                                                       nan_ok=True)
    for name in ("scaled_dot", "dot"):  # and the csv holds the runs' own numbers
        metrics = json.loads((tiny_runs / name / "metrics.json").read_text())
        assert csv.loc[name, "acc_mean"] == pytest.approx(metrics["test/acc"], rel=1e-12)
    assert leet["summary"]["attention_maps/attention_maps_s1"]["_type"] == "image-file"
    assert leet["summary"]["report/pareto"]["_type"] == "image-file"

    # the workspace specification names metrics the runs really log
    workspace = json.loads((out / "wandb_workspace.json").read_text())
    panels = [p for section in workspace["sections"] for p in section["panels"]]
    metrics = json.loads((tiny_runs / "dot" / "metrics.json").read_text())
    config_keys = set(report.run_settings(tiny_runs / "dot")[0])
    for panel in panels:
        if panel["type"] == "scatter":
            assert panel["x"] in metrics and panel["y"] in metrics
            assert panel["color"].removeprefix("config.") in config_keys
        if panel["type"] == "bar":
            assert panel["metric"] in metrics and panel["x"].removeprefix("config.") in config_keys
    assert workspace["runset"]["project"] == "attnbench"
    lines = [p for p in panels if p["type"] == "line"]
    assert [p["y"][0] for p in lines] == ["diag/layer0/entropy_norm", "diag/layer0/saturated_frac",
                                         "diag/layer0/max_score"]  # model=tiny: one layer
    history = subprocess.run(["wandb", "leet", "inspect", "--json", metrics["wandb_run_dir"]], capture_output=True,
                             text=True, timeout=120, check=True).stdout
    rows = [json.loads(line)["history"]["item"] for line in history.splitlines() if '"type":"history"' in line]
    for panel in lines:  # the series exist in the run's history, against the step the panel plots
        assert any(panel["y"][0] in row and panel["x"] in row for row in rows), panel


def test_a_long_title_fits_a_narrow_figure():
    """model=tiny has 1 layer x 2 heads: the figure is about 4.3 inches wide, and the title's settings line
    (report.py: `fixed: data=sst2, model=tiny, ...`, ~170 characters) ran off both edges, unreadable."""
    weights = [torch.rand(2, 5, 5).softmax(-1)]
    title = ("test sentence 1 (row 0): it ' s a charming and often affecting journey .\nfixed: data=sst2, model=tiny, "
             "seed=0, trainer.max_steps=20, trainer.max_epochs=3, data.max_train_samples=500, data.max_length=64, "
             "model.head_dim=null, data.batch_size=64, optim.lr=0.001, data.tokenizer.kind=wordpiece")
    fig = draw([("dot", weights, list("abcde")), ("cosine", weights, list("abcde"))], title)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig._suptitle.get_window_extent(renderer)
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
    words = fig._suptitle.get_text().split()
    assert words == title.split()  # wrapped, nothing dropped


def _reference_maps(module, ids):
    """Every layer's weights for one unpadded sentence, in float64, independently of attention_weights: the
    float64 copy's layer inputs (a forward pre-hook), the q/k heads from qkv_proj's weights by hand, the score
    function's ``reference_scores`` (its formula pair by pair) and a plain softmax. One H×L×L tensor per layer."""
    import copy

    model = copy.deepcopy(module).double().eval()
    layers = [m for m in model.modules() if hasattr(m, "score_fn") and hasattr(m, "qkv_proj")]
    inputs = {}
    handles = [layer.register_forward_pre_hook(lambda mod, args, i=i: inputs.__setitem__(i, args[0]))
               for i, layer in enumerate(layers)]
    with torch.no_grad():
        model(ids, torch.zeros_like(ids, dtype=torch.bool))
        maps = []
        for i, layer in enumerate(layers):
            x = inputs[i]
            qkv = x @ layer.qkv_proj.weight.T + layer.qkv_proj.bias
            d = qkv.shape[-1] // 3
            h = layer.score_fn.n_heads
            q, k = (qkv[..., j * d:(j + 1) * d].view(1, ids.shape[1], h, d // h).transpose(1, 2) for j in (0, 1))
            maps.append(torch.softmax(layer.score_fn.reference_scores(q, k), dim=-1)[0])
    for handle in handles:
        handle.remove()
    return maps


@pytest.mark.parametrize("attention", ["scaled_dot", "additive", "cosine"])
def test_each_heatmap_shows_its_own_layer_and_head(tmp_path, monkeypatch, attention):
    """Pins (breaker row 10, "per-head / per-layer dependence dropped"): in the figure the callback draws, the
    image of row r, column (layer, head) equals the float64 reference weights of that sentence, layer and head
    (``reference_scores`` + softmax, :func:`_reference_maps`), within 1e-4: the float32 model's rounding, measured
    up to 2.9e-5 (additive, layer 1, after layer 0's float32 error; 2e-6 in layer 0; the same path in float64
    agrees to 3e-8); and the heads of
    a layer, and the layers, show different maps (they differ by > 0.05 here), so drawing one head or one layer
    everywhere fails."""
    import attnbench.viz.attention_maps as maps_module

    figures = []
    original = maps_module.draw
    monkeypatch.setattr(maps_module, "draw", lambda *a, **kw: figures.append(original(*a, **kw)) or figures[-1])
    module = _module(attention, n_layers=2)
    AttentionMapLogger(n_sentences=2, min_tokens=5, max_tokens=16).draw(_trainer(tmp_path), module)
    (fig,) = figures
    heatmaps = [ax for ax in fig.axes if ax.images]
    sentences = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15]]  # the rows of _trainer's split the probe picks
    n_layers, n_heads = 2, 2
    assert len(heatmaps) == len(sentences) * n_layers * n_heads
    for r, ids in enumerate(sentences):
        reference = _reference_maps(module, torch.tensor([ids]))
        drawn = {}
        for layer in range(n_layers):
            for head in range(n_heads):
                ax = heatmaps[r * n_layers * n_heads + layer * n_heads + head]
                image = torch.as_tensor(ax.images[0].get_array().data, dtype=torch.float64)
                assert image.shape == (len(ids), len(ids))
                torch.testing.assert_close(image, reference[layer][head], atol=1e-4, rtol=0,
                                           msg=f"{attention} sentence {r} layer {layer} head {head}")
                drawn[layer, head] = image
        assert (drawn[0, 0] - drawn[0, 1]).abs().max() > 0.05 and (drawn[1, 0] - drawn[1, 1]).abs().max() > 0.05
        assert (drawn[0, 0] - drawn[1, 0]).abs().max() > 0.05
