"""DataLoader with two forked workers while a trace is open: each worker writes its own file."""

import os
import sys

import torch

import dynascope

out = sys.argv[1]


class Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        with dynascope.region("load_item", cat="data", image_idx=index):
            return torch.full((4,), float(index))


if __name__ == "__main__":
    torch.multiprocessing.set_start_method("fork", force=True)
    with dynascope.session(os.path.join(out, "loader.pfw.gz")):
        compiled = torch.compile(torch.nn.Linear(4, 2), backend=dynascope.backend())
        loader = torch.utils.data.DataLoader(Numbers(), batch_size=2, num_workers=2)
        for batch in loader:
            compiled(batch).sum().backward()
