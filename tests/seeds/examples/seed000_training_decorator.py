# Seed 000 "Using the Dynamo Decorator" training loop (also seed 001's "Complete Training Example").
from _synthetic import train_loader as make_loader  # -- added for the test
train_loader = make_loader()  # -- added for the test: two synthetic MNIST-shaped batches

import torch
import torch.nn as nn
from dftracer.python import dftracer, dynamo

# Initialize logger
df_logger = dftracer.initialize_log("training.pfw", "/tmp/data", -1)

# Model definition with decorator
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    @dynamo.compile
    def forward(self, x):
        x = self.conv1(x)
        x = torch.nn.functional.relu(x)
        x = self.conv2(x)
        x = torch.nn.functional.relu(x)
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = torch.nn.functional.relu(x)
        x = self.fc2(x)
        return x

# Training setup
model = ConvNet()
optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()

# Training loop
for epoch in range(5):
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()

        # Forward pass (traced by Dynamo)
        output = model(data)

        # Compute loss and backward
        loss = criterion(output, target)
        loss.backward()

        # Optimizer step
        optimizer.step()

df_logger.finalize()
