# Seed 000 "Custom Dynamo Tracer": Dynamo(...) with every parameter, and its compile decorator on a free function.
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

# Use with the compile decorator
@dynamo_tracer.compile
def forward(x):
    # Your model code
    return x

# -- added for the test: call it, with a graph that has ops, and close the trace
import torch  # noqa: E402


@dynamo_tracer.compile
def forward_with_ops(x):
    return torch.relu(x) * 2


forward(torch.randn(4))
forward_with_ops(torch.randn(4))
from dftracer.python import dftracer  # noqa: E402

dftracer.get_instance().finalize()
