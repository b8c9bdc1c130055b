"""A StiffnessHook's scalars on one forward pass of a network, without a Runner: the recorders
the hook builds, started and stopped around the pass. Importable from any test folder (it sits
beside the root conftest.py)."""
import torch


def hook_scalars(net, images, **kwargs):
    from mmstiff.engine.hooks import StiffnessHook
    hook = StiffnessHook(interval=1, **kwargs)
    recorders = hook.build_recorders(net)
    with torch.no_grad():
        for recorder in recorders.values():
            recorder.start()
        net(images)
        for recorder in recorders.values():
            recorder.stop()
    return hook.summarise({role: r.outputs for role, r in recorders.items()})
