# Seed 000 "Basic Model Tracing" (also seed 001's first example): @dynamo.compile on a forward method.
import torch
from dftracer.python import dftracer, dynamo

# Initialize logger
df_logger = dftracer.initialize_log("dynamo_trace.pfw", "/tmp/data", -1)

# Define a model
class SimpleModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, 1)
        self.fc = torch.nn.Linear(16 * 15 * 15, 10)

    @dynamo.compile
    def forward(self, x):
        x = self.conv(x)
        x = torch.nn.functional.relu(x)
        x = torch.nn.functional.max_pool2d(x, 2)
        x = x.view(x.size(0), -1)
        x = self.fc(x)
        return x

# Create model and run
model = SimpleModel()
sample = torch.randn(1, 3, 32, 32)
output = model(sample)

# Finalize
df_logger.finalize()
