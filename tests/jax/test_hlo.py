"""HLO text → instructions with Python stacks, and name stacks → tree context.

Pure parsing: runs without jax."""

from __future__ import annotations

from dc_jax.context import context_of, parse_op_name, split_name_stack
from dc_jax.hlo import Instruction, Loc, parse_module

# The shape of a compiled module's text as XLA prints it, cut down; parent ids
# printed one higher than the frame they name (as jaxlib 0.10 prints them).
MODULE = """HloModule jit_train_step, is_scheduled=true

FileNames
1 "/home/u/train.py"
2 "/venv/lib/python3.11/site-packages/flax/linen/linear.py"

FunctionNames
1 "<module>"
2 "train_step"
3 "loss_fn"
4 "MLP.__call__"
5 "Dense.__call__"

FileLocations
1 {file_name_id=1 function_name_id=1 line=40 end_line=40 column=1 end_column=9}
2 {file_name_id=1 function_name_id=2 line=30 end_line=30 column=1 end_column=9}
3 {file_name_id=1 function_name_id=3 line=20 end_line=20 column=1 end_column=9}
4 {file_name_id=1 function_name_id=4 line=10 end_line=10 column=1 end_column=9}
5 {file_name_id=2 function_name_id=5 line=294 end_line=294 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}
4 {file_location_id=4 parent_frame_id=4}
5 {file_location_id=5 parent_frame_id=5}


%fused_computation (param_0: f32[8,4], param_1: f32[4,2]) -> f32[8,2] {
  %param_0 = f32[8,4]{1,0} parameter(0)
  %param_1 = f32[4,2]{1,0} parameter(1)
  ROOT %dot_general.0 = f32[8,2]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/jvp(MLP)/Dense_0/dot_general" stack_frame_id=5}
}

ENTRY %main.3 (x.1: f32[8,4], w.1: f32[4,2]) -> (f32[8,2], f32[4,2]) {
  %x.1 = f32[8,4]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[4,2]{1,0} parameter(1)
  %ynn_fusion = f32[8,2]{1,0} fusion(%x.1, %w.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(train_step)/jvp(MLP)/Dense_0/dot_general" stack_frame_id=5}, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  %dot = f32[4,2]{1,0} dot(%x.1, %ynn_fusion), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/transpose(jvp(MLP))/Dense_0/transpose" stack_frame_id=5}
  %exp.2 = f32[8,2]{1,0} exponential(%ynn_fusion), metadata={op_name="jit(train_step)/exp" source_file="/home/u/train.py" source_line=21}
  ROOT %tuple.5 = (f32[8,2]{1,0}, /*index=1*/f32[4,2]{1,0}) tuple(%ynn_fusion, %dot)
}
"""


def test_parse_module_reads_opcodes_metadata_and_full_python_stacks():
    ops = parse_module(MODULE)
    fusion = ops["ynn_fusion"]
    assert fusion.opcode == "fusion"
    assert fusion.matmul == "dot_general"  # found inside the fused computation
    assert fusion.op_name == "jit(train_step)/jvp(MLP)/Dense_0/dot_general"
    assert [(loc.function, loc.line) for loc in fusion.stack] == [
        ("<module>", 40),
        ("train_step", 30),
        ("loss_fn", 20),
        ("MLP.__call__", 10),
        ("Dense.__call__", 294),
    ]
    assert ops["dot"].opcode == "dot" and ops["dot"].matmul == "dot_general"
    assert ops["exp.2"].stack == (Loc("", "/home/u/train.py", 21),)  # source_file/source_line form
    # No metadata: placed by its operands, a gradient operand first
    assert ops["tuple.5"].opcode == "tuple" and ops["tuple.5"].inherited
    assert (ops["tuple.5"].op_name, ops["tuple.5"].stack) == (ops["dot"].op_name, ops["dot"].stack)
    assert ops["x.1"].op_name == "x"


def test_parse_module_accepts_parent_ids_printed_unshifted():
    text = MODULE.replace(
        "2 {file_location_id=2 parent_frame_id=2}", "2 {file_location_id=2 parent_frame_id=1}"
    )
    for k in (3, 4, 5):
        text = text.replace(
            f"{k} {{file_location_id={k} parent_frame_id={k}}}",
            f"{k} {{file_location_id={k} parent_frame_id={k - 1}}}",
        )
    text = text.replace(
        "1 {file_location_id=1 parent_frame_id=1}", "1 {file_location_id=1 parent_frame_id=0}"
    )
    assert [loc.line for loc in parse_module(text)["dot"].stack] == [40, 30, 20, 10, 294]


def test_name_stack_parsing_unwraps_transforms_and_keeps_nested_slashes():
    assert split_name_stack("jit(f)/vmap(a/b)/c") == ["jit(f)", "vmap(a/b)", "c"]
    assert parse_op_name("jit(train_step)/transpose(jvp(MLP))/Dense_0/dot_general") == (
        "train_step",
        ["MLP", "Dense_0"],
        "dot_general",
        True,
    )
    # jvp(...) alone is the primal pass of grad: forward, not backward.
    assert parse_op_name("jit(step)/jvp(MLP)/jit(relu)/max") == ("step", ["MLP"], "max", False)
    assert parse_op_name("jit(step)/jvp()/reduce_max") == ("step", [], "reduce_max", False)


def test_forward_and_backward_matmul_share_the_forward_context():
    ops = parse_module(MODULE)
    forward, backward = context_of(ops["ynn_fusion"]), context_of(ops["dot"])
    expected = (
        ("python", "train_step", "/home/u/train.py", 30, ""),
        ("python", "loss_fn", "/home/u/train.py", 20, ""),
        ("module", "MLP", "MLP"),
        ("python", "MLP.__call__", "/home/u/train.py", 10, ""),
        ("module", "MLP/Dense_0", "Dense"),  # flax's own Dense.__call__ frame left out
    )
    assert forward.frames == expected and backward.frames == expected
    assert (forward.phase, forward.backward, forward.operator) == ("forward", False, "dot_general")
    # XLA folded the transpose into the matmul: the operator is the matmul.
    assert (backward.phase, backward.backward, backward.operator) == (
        "backward",
        True,
        "dot_general",
    )


def test_recorded_flax_classes_name_modules_and_optax_frames_mean_optimizer():
    stack = (
        Loc("step", "/u/t.py", 5),
        Loc("Block.__call__", "/u/m.py", 9),
        Loc("Dense.__call__", "/x/site-packages/flax/linen/linear.py", 1),
    )
    ins = Instruction("fusion.1", "fusion", "jit(step)/Block/proj/dot_general", stack)
    ctx = context_of(ins, classes={"Block/proj": "Dense"})
    assert ctx.frames[-1] == ("module", "Block/proj", "Dense")
    optax_stack = (
        Loc("step", "/u/t.py", 7),
        Loc("scale_by_adam.<locals>.update_fn", "/x/site-packages/optax/_src/transform.py", 300),
    )
    upd = context_of(Instruction("add.3", "add", "jit(step)/add", optax_stack))
    assert upd.phase == "optimizer" and upd.frames == (("python", "step", "/u/t.py", 7, ""),)
    loss_stack = (
        Loc("step", "/u/t.py", 6),
        Loc("softmax_cross_entropy", "/x/site-packages/optax/losses/_classification.py", 1),
    )
    assert (
        context_of(Instruction("exp.1", "exponential", "jit(step)/exp", loss_stack)).phase
        == "forward"
    )
    # A phase the user marked applies to ops the name stack does not place.
    assert (
        context_of(
            Instruction("exp.1", "exponential", "jit(aug)/exp", ()), marked="dataloader"
        ).phase
        == "dataloader"
    )


def test_nnx_containers_never_called_are_not_module_frames():
    stack = (
        Loc("step", "/u/t.py", 5),
        Loc("MLP.__call__", "/u/m.py", 9),
        Loc("Linear.__call__", "/x/site-packages/flax/nnx/nn/linear.py", 1),
    )
    ins = Instruction(
        "dot.1", "dot", "jit(step)/jvp(MLP)/layers/0/dot_general", stack, "dot_general"
    )
    ctx = context_of(ins, classes={"MLP": "MLP", "MLP/layers/0": "Linear"})
    assert [f for f in ctx.frames if f[0] == "module"] == [
        ("module", "MLP", "MLP"),
        ("module", "MLP/layers/0", "Linear"),
    ]
    # right above Linear's own (library) frame
    assert ctx.frames[-1] == (
        "module",
        "MLP/layers/0",
        "Linear",
    )


def test_einsum_specs_and_merged_op_names_are_not_modules():
    # jnp.einsum names its computation after the spec; XLA joins merged ops' names with ";".
    merged = (
        "jit(step)/transpose(jvp(Net))/attn/vmap(BNTS,BSNH->BTNH)/transpose"
        ";jit(step)/transpose(jvp(Net))/attn/vmap()/transpose"
    )
    assert parse_op_name(merged) == ("step", ["Net", "attn"], "transpose", True)
    assert parse_op_name("jit(step)/jvp(Net)/attn/BTNH,BSNH->BNTS/dot_general")[1] == [
        "Net",
        "attn",
    ]


PROVENANCE = """HloModule jit_step, is_scheduled=true

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %v = f32[4]{0} get-tuple-element(%p), index=1
  %carried = f32[4]{0} copy(%v)
  %next = s32[] add(%i, %i), metadata={op_name="jit(step)/Dropout_0/while/body/add" source_file="/u/m.py" source_line=7}
  ROOT %t = (s32[], f32[4]) tuple(%next, %carried)
}

ENTRY %main (w: f32[4,4], x: f32[4]) -> f32[4] {
  %w = f32[4,4]{1,0} parameter(0), metadata={op_name="params['Dense_0']['kernel']"}
  %x = f32[4]{0} parameter(1), metadata={op_name="x"}
  %w_t = f32[4,4]{0,1} transpose(%w), dimensions={1,0}
  %y = f32[4]{0} dot(%w_t, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/Dense_0/dot_general" source_file="/u/m.py" source_line=3}
  %dy = f32[4]{0} negate(%y), metadata={op_name="jit(step)/transpose(jvp(Dense_0))/neg" source_file="/u/m.py" source_line=3}
  %wgrad = f32[4]{0} multiply(%y, %dy)
  %init = (s32[], f32[4]) tuple(%dy, %dy)
  ROOT %loop = (s32[], f32[4]) while(%init), body=%body, metadata={op_name="jit(step)/Dropout_0/while" source_file="/u/m.py" source_line=7}
}
"""


def test_instructions_without_metadata_are_placed_by_operands_users_or_their_loop():
    ops = parse_module(PROVENANCE)
    # a weight's layout transpose: only a parameter feeds it, so the op reading it places it
    assert ops["w_t"].inherited and ops["w_t"].op_name == "jit(step)/Dense_0/dot_general"
    # a weight gradient made of a forward and a gradient operand is backward
    assert ops["wgrad"].op_name == "jit(step)/transpose(jvp(Dense_0))/neg"
    ctx = context_of(ops["wgrad"])
    assert ctx.backward and ctx.phase == "backward" and ctx.operator == "multiply"
    # a loop's carried copy: placed inside the loop that carries it (by the body's
    # result it feeds), never in the program's top level
    assert ops["carried"].op_name.startswith("jit(step)/Dropout_0/while")
    assert context_of(ops["carried"]).operator == "copy"
    # what has metadata keeps its own
    assert not ops["next"].inherited and ops["next"].op_name.endswith("/while/body/add")


def test_ops_nothing_places_are_unattributed_not_forward():
    lone = Instruction("copy.9", "copy", "", ())
    assert context_of(lone).phase == "unattributed"
    # dispatched inside a marked phase
    assert context_of(lone, marked="dataloader").phase == "dataloader"


def test_conv_is_named_conv_whether_or_not_its_class_was_recorded():
    # Linen's Conv runs _Conv.__call__: without the hooks' record (compiled before
    # the window) the module keeps the name Linen gave it, as with the record.
    stack = (
        Loc("step", "/u/t.py", 5),
        Loc("CNN.__call__", "/u/m.py", 9),
        Loc("_Conv.__call__", "/x/site-packages/flax/linen/linear.py", 1),
    )
    ins = Instruction(
        "convolution.1", "convolution", "jit(step)/jvp(CNN)/Conv_0/conv_general_dilated", stack
    )
    unrecorded = context_of(ins)
    recorded = context_of(ins, classes={"CNN": "CNN", "CNN/Conv_0": "Conv"})
    assert unrecorded.frames == recorded.frames
    assert unrecorded.frames[-1] == ("module", "CNN/Conv_0", "Conv")


# A Linen CNN's step as XLA compiles it, cut down: Conv_0 reads one input feature, and
# XLA rewrote its weight gradient into a fusion without metadata whose operands come
# from the input and from the gradient BatchNorm_0 made; Conv_1's kernel has the same
# shape, so only what uses the gradient (the optimizer's update of Conv_0's kernel)
# tells the two apart.
CONV_STEP = """HloModule jit_train_step, is_scheduled=true

%fused_conv (param_0: f32[8,6,6,1], param_1: f32[3,3,1,4]) -> f32[8,6,6,4] {
  %param_0 = f32[8,6,6,1]{3,2,1,0} parameter(0)
  %param_1 = f32[3,3,1,4]{3,2,1,0} parameter(1)
  ROOT %conv_general_dilated.1 = f32[8,6,6,4]{3,2,1,0} convolution(%param_0, %param_1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, metadata={op_name="jit(train_step)/jvp(CNN)/Conv_0/conv_general_dilated" source_file="/u/m.py" source_line=11}
}

%fused_wgrad (param_0.1: f32[1,6,6,8], param_1.1: f32[6,6,8,4]) -> f32[1,3,3,4] {
  %param_0.1 = f32[1,6,6,8]{3,2,1,0} parameter(0)
  %param_1.1 = f32[6,6,8,4]{3,2,1,0} parameter(1)
  ROOT %convolution.4 = f32[1,3,3,4]{3,2,1,0} convolution(%param_0.1, %param_1.1), window={size=6x6 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}

ENTRY %main (kernel: f32[3,3,1,4], other: f32[3,3,1,4], x: f32[8,6,6,1], mu: f32[3,3,1,4]) -> (f32[3,3,1,4], f32[8,6,6,4]) {
  %kernel = f32[3,3,1,4]{3,2,1,0} parameter(0), metadata={op_name="params['Conv_0']['kernel']"}
  %other = f32[3,3,1,4]{3,2,1,0} parameter(1), metadata={op_name="params['Conv_1']['kernel']"}
  %x = f32[8,6,6,1]{3,2,1,0} parameter(2), metadata={op_name="x"}
  %mu = f32[3,3,1,4]{3,2,1,0} parameter(3), metadata={op_name="opt[0].mu['Conv_0']['kernel']"}
  %ynn_fusion.1 = f32[8,6,6,4]{3,2,1,0} fusion(%x, %kernel), kind=kCustom, calls=%fused_conv, metadata={op_name="jit(train_step)/jvp(CNN)/Conv_0/conv_general_dilated" source_file="/u/m.py" source_line=11}
  %ynn_fusion.2 = f32[8,6,6,4]{3,2,1,0} fusion(%x, %other), kind=kCustom, calls=%fused_conv, metadata={op_name="jit(train_step)/jvp(CNN)/Conv_1/conv_general_dilated" source_file="/u/m.py" source_line=14}
  %bn_grad = f32[8,6,6,4]{3,2,1,0} multiply(%ynn_fusion.1, %ynn_fusion.2), metadata={op_name="jit(train_step)/transpose(jvp(CNN))/BatchNorm_0/mul" source_file="/u/m.py" source_line=12}
  %x_t = f32[1,6,6,8]{3,2,1,0} transpose(%x), dimensions={3,1,2,0}
  %dy_t = f32[6,6,8,4]{3,2,1,0} transpose(%bn_grad), dimensions={1,2,0,3}
  %ynn_fusion.3 = f32[1,3,3,4]{3,2,1,0} fusion(%x_t, %dy_t), kind=kCustom, calls=%fused_wgrad
  %mu_next = f32[3,3,1,4]{3,2,1,0} add(%mu, %ynn_fusion.3), metadata={op_name="jit(train_step)/add" source_file="/x/site-packages/optax/_src/transform.py" source_line=90}
  %update = f32[3,3,1,4]{3,2,1,0} subtract(%kernel, %mu_next), metadata={op_name="jit(train_step)/sub" source_file="/x/site-packages/optax/_src/update.py" source_line=40}
  ROOT %out = (f32[3,3,1,4]{3,2,1,0}, f32[8,6,6,4]{3,2,1,0}) tuple(%update, %bn_grad)
}
"""


def test_a_weight_gradient_conv_without_metadata_goes_to_its_conv_not_the_batchnorm_after_it():
    # Regression: placed by its operands, Conv_0's weight gradient sat under
    # BatchNorm_0 (whose gradient it reads), as BatchNorm backward time.
    ops = parse_module(CONV_STEP)
    wgrad = ops["ynn_fusion.3"]
    assert wgrad.inherited and wgrad.matmul == "conv_general_dilated"
    assert wgrad.op_name == "jit(train_step)/transpose(jvp(CNN))/Conv_0/conv_general_dilated"
    assert wgrad.stack == ops["ynn_fusion.1"].stack  # the forward conv's line
    ctx = context_of(wgrad)
    assert (ctx.phase, ctx.backward, ctx.operator) == ("backward", True, "conv_general_dilated")
    assert [f for f in ctx.frames if f[0] == "module"] == [
        ("module", "CNN", "CNN"),
        ("module", "CNN/Conv_0", "Conv"),
    ]
    # the layout copies feeding it keep the old rule (operands and users)
    assert "BatchNorm_0" in ops["dy_t"].op_name


def test_a_weight_gradient_conv_with_no_user_reading_a_weight_is_left_to_its_operands_when_ambiguous():
    # The step returns the gradient: nothing tells Conv_0 from Conv_1, whose kernels share a shape.
    text = CONV_STEP.replace("add(%mu, %ynn_fusion.3)", "add(%mu, %mu)").replace(
        "tuple(%update, %bn_grad)", "tuple(%ynn_fusion.3, %bn_grad)"
    )
    assert "BatchNorm_0" in parse_module(text)["ynn_fusion.3"].op_name
    # with one conv of that kernel shape, the shape alone places it
    single = text.replace("fusion(%x, %other)", "fusion(%x, %x)")
    assert "/Conv_0/" in parse_module(single)["ynn_fusion.3"].op_name


def test_combined_all_reduce_is_an_all_reduce_in_the_scopes_its_members_share():
    # Regression: XLA's all-reduce combiner names what it makes after the
    # reductions it merged, ``(a:b)``; the joined list became the operator's name.
    combined = "jit(step)/shard_map/(psum_invariant:transpose(jvp(MLP))/l1/psum_invariant:transpose(jvp(MLP))/l1/mul)"
    assert parse_op_name(combined) == ("step", ["shard_map", "MLP", "l1"], "", True)
    assert parse_op_name("jit(step)/(reduce_sum:jvp()/reduce_sum)") == ("step", [], "", False)
    stack = (Loc("step", "/u/t.py", 33),)
    ins = Instruction("all-reduce.1", "all-reduce", combined, stack)
    ctx = context_of(ins, classes={"MLP": "MLP", "MLP/l1": "Linear"})
    assert ctx.operator == "all-reduce" and ctx.backward and ctx.scoped
    assert ctx.frames == (
        ("python", "step", "/u/t.py", 33, ""),
        ("module", "MLP", "MLP"),
        ("module", "MLP/l1", "Linear"),
    )
    # an uncombined reduction is named as XLA runs it, too
    single = Instruction("psum.3", "all-reduce", "jit(step)/shard_map/psum", stack)
    assert context_of(single).operator == "all-reduce" and not context_of(single).scoped


def test_jax_scopes_are_never_modules():
    # Regression: ``shard_map (shard_map)`` showed as a module, and the module
    # paths under it (``shard_map/MLP``) missed the recorded classes.
    stack = (Loc("step", "/u/t.py", 5), Loc("MLP.__call__", "/u/m.py", 9))
    for scope in ("shard_map", "xla_pmap", "custom_vjp_call", "pjit"):
        ins = Instruction(
            "dot.1", "dot", f"jit(step)/{scope}/jvp(MLP)/l1/dot_general", stack, "dot_general"
        )
        ctx = context_of(ins, classes={"MLP": "MLP", "MLP/l1": "Linear"})
        assert [f for f in ctx.frames if f[0] == "module"] == [
            ("module", "MLP", "MLP"),
            ("module", "MLP/l1", "Linear"),
        ]
