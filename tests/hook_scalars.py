"""A diagnostics hook's scalars on one forward pass of a network, without a Runner: the
recorders the hook builds, started and stopped around the pass. Importable from any test folder
(it sits beside the root conftest.py)."""
import torch


def hook_outputs(hook, net, images):
    """``{role: recorder outputs}`` of ``hook``'s recorders over one pass of ``net``."""
    recorders = hook.build_recorders(net)
    with torch.no_grad():
        for recorder in recorders.values():
            recorder.start()
        net(images)
        for recorder in recorders.values():
            recorder.stop()
    return {role: r.outputs for role, r in recorders.items()}


def hook_scalars(net, images, **kwargs):
    """A ``StiffnessHook(interval=1, **kwargs)``'s scalars of one pass of ``net``."""
    from mmstiff.engine.hooks import StiffnessHook
    hook = StiffnessHook(interval=1, **kwargs)
    return hook.summarise(hook_outputs(hook, net, images))
