# Seed 001 "Custom Dynamo Tracer": constructing the tracer (the guide leaves its use to the reader).
from dftracer.python import Dynamo

# Create a custom Dynamo tracer
dynamo_tracer = Dynamo(
    name="resnet50",
    epoch=1,
    step=100,
    image_idx=42,
    image_size=(224, 224),
    enable=True
)

# Use in your training loop
# The tracer will automatically track operations

# -- added for the test: use it in a short loop so there is something to trace
import torch  # noqa: E402
from dftracer.python import dftracer  # noqa: E402

df_logger = dftracer.initialize_log("custom.pfw", None, -1)
model = torch.compile(torch.nn.Linear(8, 2), backend=dynamo_tracer.backend())
for _ in range(2):
    model(torch.randn(3, 8)).sum().backward()
df_logger.finalize()
