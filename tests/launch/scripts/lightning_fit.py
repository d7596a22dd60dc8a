"""A Lightning script: a tiny MLP fit on CPU for 12 steps, no profiler unless asked.

``--own-callback`` passes the script's own DeepContextCallback;
``--bad-first`` first builds a Trainer that fails; ``--test`` then tests with a
second Trainer; ``--inspect`` prints ``Trainer.__init__``'s first parameters
and the classes of the callbacks round-tripped through pickle as ``ddp_spawn`` does.
"""

import argparse
import inspect
import pickle

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.layers(x)


class LitMLP(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.encoder(x), y)

    def test_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.encoder(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader():
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(96, 16, generator=g), torch.randint(0, 4, (96,), generator=g)
    )
    return torch.utils.data.DataLoader(data, batch_size=8)


def trainer(callbacks):
    return L.Trainer(
        max_steps=12,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--own-callback", action="store_true")
    parser.add_argument("--bad-first", action="store_true")
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--inspect", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.bad_first:
        try:
            L.Trainer(accelerator="no-such-accelerator")
        except ValueError as exc:
            print("bad trainer:", type(exc).__name__, str(exc).split(":")[0])
    callbacks = []
    if args.own_callback:
        from dc_lightning import DeepContextCallback

        callbacks.append(DeepContextCallback(logdir="own-profiles", steps={"start": 1, "count": 2}))
    model = LitMLP()
    fitting = trainer(callbacks)
    if args.inspect:
        print("signature:", list(inspect.signature(L.Trainer.__init__).parameters)[:3])
        print(
            "pickled callbacks:",
            [type(c).__name__ for c in pickle.loads(pickle.dumps(fitting.callbacks))],
        )
    fitting.fit(model, loader())
    print("fit done at step", fitting.global_step)
    if args.test:
        trainer([]).test(model, loader(), verbose=False)
        print("test done")


if __name__ == "__main__":
    main()
