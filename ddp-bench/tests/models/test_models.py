"""Every bench model: output shapes, the README's sizes, ResNet-20 hand-written vs FlowBuilder."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ddp_bench.models import MODEL_NAMES, SPECS, GptNano, resnet, resnet_graph
from ddp_bench.models._resnet import build_graph

INPUTS = {
    "mnist": (lambda b: torch.rand(b, 1, 28, 28), (10,)),
    "cifar10": (lambda b: torch.rand(b, 3, 32, 32), (10,)),
    "shakespeare": (lambda b: torch.randint(0, 65, (b, 16)), (16, 65)),
}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_output_shape(name: str) -> None:
    spec = SPECS[name]
    torch.manual_seed(0)
    model = spec.make(65)
    make, out = INPUTS[spec.dataset]
    x = make(3)
    y = model(x)
    expected = (3, 1, 28, 28) if spec.task == "recon" else (3, *out)
    assert tuple(y.shape) == expected
    if spec.task == "recon":  # sigmoid output, like the [0, 1] input it reconstructs
        assert float(y.detach().min()) >= 0 and float(y.detach().max()) <= 1


def test_sizes_match_the_reference_table() -> None:
    counts = {n: sum(p.numel() for p in SPECS[n].make(65).parameters()) for n in MODEL_NAMES}
    assert counts["logistic"] == 784 * 10 + 10
    assert counts["mlp"] == 784 * 256 + 256 + 256 * 10 + 10
    # ResNet-20 has ~0.27M parameters (He et al. 2016, Table 6).
    assert 265_000 < counts["resnet"] < 275_000
    assert counts["resnet"] == counts["resnet-graph"]
    lstm = 4 * 256 * (128 + 256 + 2) + 4 * 256 * (256 + 256 + 2)
    assert counts["char-rnn"] == 65 * 128 + lstm + 256 * 65 + 65


def test_hyperparameters_follow_the_table() -> None:
    assert all(SPECS[n].batch_size == 64 for n in MODEL_NAMES)
    assert (SPECS["resnet"].optimizer, SPECS["resnet"].lr, SPECS["resnet"].epochs) == (
        "sgd",
        0.1,
        200,
    )
    assert SPECS["char-rnn"].optimizer == "rmsprop" and SPECS["char-rnn"].lr == 2e-3
    assert SPECS["gpt-nano"].schedule == "warmup-cosine" and SPECS["gpt-nano"].lr == 3e-4


def test_resnet_graph_equals_hand_written() -> None:
    torch.manual_seed(7)
    hand = resnet()
    torch.manual_seed(7)
    graph = resnet_graph()
    hand_params = sorted((p.shape, float(p.detach().sum())) for p in hand.parameters())
    graph_params = sorted((p.shape, float(p.detach().sum())) for p in graph.parameters())
    assert hand_params == graph_params, "same seed must give the same weights"
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([0, 3, 5, 9])
    outs = []
    for model in (hand, graph):
        out = model(x)
        F.cross_entropy(out, target).backward()
        outs.append(out.detach())
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=0)
    grads_h = sorted(float(p.grad.abs().sum()) for p in hand.parameters())
    grads_g = sorted(float(p.grad.abs().sum()) for p in graph.parameters())
    torch.testing.assert_close(torch.tensor(grads_h), torch.tensor(grads_g), atol=1e-5, rtol=1e-5)
    # Eval mode (BN running statistics) agrees too.
    hand.eval()
    graph.eval()
    torch.testing.assert_close(hand(x), graph(x), atol=1e-5, rtol=0)


def test_resnet_graph_wiring_on_the_hand_models_parameters() -> None:
    """The graph wired from the hand-written model's own parts computes the same function."""
    torch.manual_seed(3)
    hand = resnet()
    graph = build_graph(hand.stem, [(b.main, b.skip) for b in hand.blocks], hand.head)
    x = torch.rand(2, 3, 32, 32)
    torch.testing.assert_close(graph(x), hand(x), atol=1e-6, rtol=0)
    with torch.no_grad():  # move every weight: both still agree
        for p in hand.parameters():
            p.add_(0.01 * torch.randn_like(p))
    torch.testing.assert_close(graph(x), hand(x), atol=1e-6, rtol=0)


def test_gpt_nano_is_causal() -> None:
    torch.manual_seed(0)
    model = GptNano(65).eval()
    a = torch.randint(0, 65, (1, 20))
    b = a.clone()
    b[0, 12:] = (b[0, 12:] + 1) % 65  # change only the future of position 11
    torch.testing.assert_close(model(a)[0, :12], model(b)[0, :12])
    assert not torch.allclose(model(a)[0, 12:], model(b)[0, 12:])
