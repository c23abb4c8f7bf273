"""Which frame of a stack is the user's (userframes.py), and the user line the explanation gives a guard that
torch names a library's line for (explain/guards.py, charge_to_user_frames). Torch-free."""

import os
import site

import dynascope
from dynascope.artifacts.explanation import Guard, GuardGroup, UserLine
from dynascope.explain.guards import charge_to_user_frames, first_uses
from dynascope.userframes import first_user_frame, is_library_file, library_text

PACKAGES = site.getsitepackages()[0]
USER = "/home/me/project/train.py"


def test_library_files_are_packages_the_stdlib_and_torchs_own_short_paths():
    assert is_library_file(os.path.join(PACKAGES, "transformers", "modeling_utils.py"))
    assert is_library_file("/usr/lib/python3/dist-packages/numpy/core.py")
    assert is_library_file(os.__file__)  # the standard library
    assert is_library_file("nn/modules/conv.py")  # torch names its own files relative to itself
    assert is_library_file("<frozen importlib._bootstrap>") and is_library_file(None)
    assert not is_library_file(USER)
    # dynascope's own code (the call wrapper Dynamo may compile) is a library's, but its built-in demo stands
    # for the user's script, wherever dynascope is installed (a package in site-packages in the matrix)
    own = os.path.dirname(os.path.realpath(dynascope.__file__))
    assert is_library_file(os.path.join(own, "capture", "frames.py"))
    assert not is_library_file(os.path.join(own, "demo", "train.py"))


def test_the_first_user_frame_is_the_innermost_that_is_not_a_librarys():
    stack = [USER, USER.replace("train", "model"), os.path.join(PACKAGES, "lib", "x.py"), "nn/modules/linear.py"]
    assert first_user_frame(stack) == 1
    assert first_user_frame([USER]) == 0
    assert first_user_frame(stack[2:]) is None
    assert library_text("nn/modules/conv.py", 560) == "torch/nn/modules/conv.py:560"
    assert library_text(os.path.join(PACKAGES, "transformers", "x.py"), 12) == "transformers/x.py:12"


FX = '''class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[8, 1, 28, 28]", L_self_modules_conv1_parameters_weight_: "f32[8, 1, 3, 3]"):
        l_x_ = L_x_
        l_self_modules_conv1_parameters_weight_ = L_self_modules_conv1_parameters_weight_

        # File: /home/me/project/train.py:30 in forward, code: x = F.relu(self.conv1(x))
        conv2d: "f32[8, 8, 26, 26]" = torch.conv2d(l_x_, l_self_modules_conv1_parameters_weight_, None);  l_x_ = None
        x: "f32[8, 8, 26, 26]" = torch.nn.functional.relu(conv2d);  conv2d = None

        # File: /home/me/project/train.py:31 in forward, code: return x.sum()
        sum_1: "f32[]" = x.sum();  x = None
        return (sum_1,)
'''


def test_a_guard_torch_puts_inside_torch_nn_is_charged_to_the_users_line_that_led_there():
    assert first_uses(FX)["L_x_"] == (USER, 30, "x = F.relu(self.conv1(x))")
    lib = UserLine(file="nn/modules/conv.py", line=560, code="return F.conv2d(")
    tensor = Guard(kind="TENSOR_MATCH", text="x: Tensor", raw="check_tensor(L['x'], Tensor, ...)", user_line=lib)
    shape = Guard(kind="LAMBDA_GUARD", text="2 <= x.size()[0]", raw="2 <= L['x'].size()[0]", user_line=lib)
    weight = Guard(kind="TENSOR_MATCH", text="w", raw="check_tensor(L['self']._modules['conv1']._parameters"
                   "['weight'], ...)", user_line=lib)  # fmt: skip
    own = Guard(kind="EQUALS_MATCH", text="n == 2", raw="L['n'] == 2", user_line=UserLine(USER, 12, "y = x * n"))
    groups = [GuardGroup(subject="x", source="L['x']", guards=[tensor, shape]),
              GuardGroup(subject="self", source="L['self']", guards=[weight]),
              GuardGroup(subject="n", source="L['n']", guards=[own])]  # fmt: skip
    charge_to_user_frames(groups, [FX])
    for g in (tensor, shape, weight):
        assert g.user_line is not None
        assert (g.user_line.file, g.user_line.line, g.user_line.code) == (USER, 30, "x = F.relu(self.conv1(x))")
        assert (g.user_line.library_file, g.user_line.library_line) == ("nn/modules/conv.py", 560)
    assert own.user_line == UserLine(USER, 12, "y = x * n")  # the user's own line already
