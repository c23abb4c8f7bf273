"""A fine-tuning run in the style of a Hugging Face `Trainer` script, without transformers installed.

What a user of `transformers` runs, boiled down to plain torch: `TrainingArguments`, a `Trainer`
with `training_step`, `compute_loss`, `evaluate` and `save_model` (every `save_steps`), a logging
callback, and a tiny GPT-2-like causal LM whose forward takes `input_ids`, `attention_mask` and
`labels` and returns a `ModelOutput`-like dataclass. As in transformers, forward calls a Python-side
helper (a padding check that warns once through `logging`) that TorchDynamo cannot trace, so the
compiled forward has a graph break. `torch_compile=True` compiles the model as Trainer does.

    python hf_trainer.py --max_steps 12 --n_layer 2 --per_device_train_batch_size 8
"""

import argparse
import dataclasses
import functools
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

logger = logging.getLogger("transformers.trainer")
model_logger = logging.getLogger("transformers.models.gpt2.modeling_gpt2")


@functools.lru_cache(None)
def warning_once(message: str) -> None:
    """transformers' `logger.warning_once`: the same message is logged only the first time."""
    model_logger.warning(message)


# --------------------------------------------------------------------------- configuration


@dataclass
class GPT2Config:
    vocab_size: int = 128
    n_positions: int = 64
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 2
    layer_norm_epsilon: float = 1e-5
    pad_token_id: int = 0


@dataclass
class TrainingArguments:
    output_dir: str = "trainer_output"
    per_device_train_batch_size: int = 4
    per_device_eval_batch_size: int = 4
    learning_rate: float = 5e-4
    weight_decay: float = 0.0
    warmup_steps: int = 2
    max_steps: int = 8
    logging_steps: int = 2
    save_steps: int = 4
    eval_steps: int = 4
    seed: int = 42
    torch_compile: bool = True
    torch_compile_backend: str = "inductor"
    dataloader_drop_last: bool = False


@dataclass
class CausalLMOutput:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None


# --------------------------------------------------------------------------- model


class GPT2Attention(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.num_heads = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, hidden_states, attention_mask=None):
        bsz, seq, dim = hidden_states.shape
        query, key, value = self.c_attn(hidden_states).split(dim, dim=2)
        shape = (bsz, seq, self.num_heads, self.head_dim)
        query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
        causal = torch.ones(seq, seq, dtype=torch.bool, device=hidden_states.device).tril()
        mask = causal[None, None, :, :]
        if attention_mask is not None:
            mask = mask & attention_mask[:, None, None, :].bool()
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        return self.c_proj(out.transpose(1, 2).reshape(bsz, seq, dim))


class GPT2MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, hidden_states):
        return self.c_proj(F.gelu(self.c_fc(hidden_states), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config)

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), attention_mask)
        hidden_states = hidden_states + self.mlp(self.ln_2(hidden_states))
        # clamp inf values to enable fp16 training (as transformers' T5 blocks do: a check on the data)
        if torch.isinf(hidden_states).any():
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return hidden_states


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(GPT2Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def warn_if_padding_and_no_attention_mask(self, input_ids, attention_mask):
        """As transformers' PreTrainedModel: a Python-side check on the data (a graph break)."""
        if attention_mask is not None and bool((attention_mask == 0).all()):
            return
        if attention_mask is None and (input_ids[:, [-1, 0]] == self.config.pad_token_id).any():
            warning_once("We strongly recommend passing in an `attention_mask` since your input_ids may be padded.")

    def forward(self, input_ids=None, attention_mask=None, labels=None, return_dict=True):
        self.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
        seq = input_ids.shape[1]
        positions = torch.arange(seq, device=input_ids.device)[None, :]
        hidden_states = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask)
        logits = self.lm_head(self.ln_f(hidden_states))
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)


# --------------------------------------------------------------------------- data


class FakeTextDataset(Dataset):
    """Tokenized, padded samples: `input_ids`, `attention_mask` and `labels` (padding labelled -100)."""

    def __init__(self, size: int, seq_len: int, vocab_size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(1, vocab_size, (size, seq_len), generator=generator)
        lengths = torch.randint(seq_len // 2, seq_len + 1, (size,), generator=generator)
        self.attention_mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
        self.input_ids[self.attention_mask == 0] = 0

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, index):
        labels = self.input_ids[index].clone()
        labels[self.attention_mask[index] == 0] = -100
        return {"input_ids": self.input_ids[index], "attention_mask": self.attention_mask[index], "labels": labels}


# --------------------------------------------------------------------------- trainer


class TrainerCallback:
    def on_log(self, args, state, logs):
        pass


class LoggingCallback(TrainerCallback):
    def on_log(self, args, state, logs):
        logger.info(json.dumps({**logs, "step": state["global_step"]}))


class Trainer:
    def __init__(self, model, args, train_dataset, eval_dataset=None, callbacks=None):
        self.args = args
        self.model = model
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.callbacks = callbacks or [LoggingCallback()]
        self.state = {"global_step": 0, "log_history": []}
        self.model_wrapped = model
        if args.torch_compile:
            self.model_wrapped = torch.compile(model, backend=args.torch_compile_backend)

    def get_train_dataloader(self):
        return DataLoader(
            self.train_dataset,
            batch_size=self.args.per_device_train_batch_size,
            shuffle=True,
            drop_last=self.args.dataloader_drop_last,
        )

    def create_optimizer_and_scheduler(self, num_training_steps):
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.args.learning_rate,
        )

        def lr_lambda(step):
            if step < self.args.warmup_steps:
                return float(step + 1) / float(max(1, self.args.warmup_steps))
            progress = float(step - self.args.warmup_steps) / float(max(1, num_training_steps - self.args.warmup_steps))
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)

    def compute_loss(self, model, inputs, return_outputs=False):
        outputs = model(**inputs)
        loss = outputs.loss
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model, inputs):
        model.train()
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

    def log(self, logs):
        self.state["log_history"].append({**logs, "step": self.state["global_step"]})
        for callback in self.callbacks:
            callback.on_log(self.args, self.state, logs)

    def evaluate(self):
        loader = DataLoader(self.eval_dataset, batch_size=self.args.per_device_eval_batch_size)
        model = self.model_wrapped
        model.eval()
        losses = []
        with torch.no_grad():
            for inputs in loader:
                loss, _ = self.compute_loss(model, inputs, return_outputs=True)
                losses.append(loss.item())
        metrics = {"eval_loss": sum(losses) / len(losses)}
        self.log(metrics)
        return metrics

    def save_model(self, output_dir=None):
        output_dir = output_dir or self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        torch.save(self.model.state_dict(), os.path.join(output_dir, "pytorch_model.bin"))
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
        with open(os.path.join(output_dir, "trainer_state.json"), "w") as f:
            json.dump(self.state, f)

    def train(self):
        args = self.args
        torch.manual_seed(args.seed)
        self.create_optimizer_and_scheduler(args.max_steps)
        loader = self.get_train_dataloader()
        tr_loss = 0.0
        start = time.time()
        while self.state["global_step"] < args.max_steps:
            for inputs in loader:
                loss = self.training_step(self.model_wrapped, inputs)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad()
                tr_loss += loss.item()
                self.state["global_step"] += 1
                step = self.state["global_step"]
                if step % args.logging_steps == 0:
                    self.log({"loss": round(tr_loss / args.logging_steps, 4), "learning_rate": self.lr_scheduler.get_last_lr()[0]})
                    tr_loss = 0.0
                if self.eval_dataset is not None and step % args.eval_steps == 0:
                    self.evaluate()
                if step % args.save_steps == 0:
                    self.save_model(os.path.join(args.output_dir, f"checkpoint-{step}"))
                if step >= args.max_steps:
                    break
        runtime = time.time() - start
        self.log({"train_runtime": round(runtime, 3), "train_steps_per_second": round(args.max_steps / runtime, 3)})
        return self.state


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for f in dataclasses.fields(TrainingArguments):
        if f.type in (int, float, str, "int", "float", "str"):
            parser.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
        elif f.type in (bool, "bool"):
            parser.add_argument(f"--{f.name}", type=lambda s: s.lower() in ("1", "true", "yes"), default=f.default)
    parser.add_argument("--n_layer", type=int, default=2)
    parser.add_argument("--n_embd", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--train_samples", type=int, default=40)
    parser.add_argument("--eval_samples", type=int, default=8)
    ns = vars(parser.parse_args())
    model_config = GPT2Config(n_layer=ns.pop("n_layer"), n_embd=ns.pop("n_embd"))
    seq_len, train_samples, eval_samples = ns.pop("seq_len"), ns.pop("train_samples"), ns.pop("eval_samples")
    args = TrainingArguments(**ns)

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(model_config)
    train_dataset = FakeTextDataset(train_samples, seq_len, model_config.vocab_size, seed=1)
    eval_dataset = FakeTextDataset(eval_samples, seq_len, model_config.vocab_size, seed=2)
    trainer = Trainer(model, args, train_dataset, eval_dataset)
    state = trainer.train()
    print(json.dumps(state["log_history"][-1]))


if __name__ == "__main__":
    main()
