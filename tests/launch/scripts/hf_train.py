"""A Hugging Face script: a tiny GPT-2 built from a config, trained on CPU for 12 steps.

``--own-callback`` adds the script's own DeepContextCallback after the
Trainer is built (``trainer.add_callback``).
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 48, length: int = 16) -> None:
        self.ids = torch.randint(0, 128, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--own-callback", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2,
            n_embd=32,
            n_head=2,
            vocab_size=128,
            n_positions=32,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    settings = TrainingArguments(
        output_dir="hf-out",
        use_cpu=True,
        report_to=[],
        max_steps=12,
        per_device_train_batch_size=4,
        logging_steps=100,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=settings, train_dataset=Tokens())
    if args.own_callback:
        from dc_hf import DeepContextCallback

        trainer.add_callback(
            DeepContextCallback(logdir="own-profiles", steps={"start": 1, "count": 2})
        )
    trainer.train()
    print("trained to step", trainer.state.global_step)


if __name__ == "__main__":
    main()
