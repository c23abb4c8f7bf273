# Seed 000 "Using create_backend with torch.compile".
from _synthetic import MyModel  # -- added for the test: the seed assumes MyModel and input_tensor exist
import torch  # noqa: E402
input_tensor = torch.randn(32, 784)  # -- added for the test

import torch
from dftracer.python import dftracer
from dftracer.python.dynamo import create_backend

# Initialize logger
df_logger = dftracer.initialize_log("training.pfw", "/tmp/data", -1)

# Create a custom DFTracer backend
backend = create_backend(
    name="resnet50",
    epoch=1,
    step=100,
    enable=True,
    autograd=True  # Enable AOT autograd (default)
)

# Use with torch.compile
model = MyModel()
compiled_model = torch.compile(model, backend=backend)

# Run your model - operations will be traced
output = compiled_model(input_tensor)

df_logger.finalize()
