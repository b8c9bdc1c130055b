"""The smallest study file the runner's tests write: the demo config with and without its
adaptor, two seeds. Importable from any test folder (it sits beside the root conftest.py)."""
DEMO = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'
TINY_STUDY = f'''
name = 'tiny'
claim = dict(quote='q', source='s')
seeds = [0, 1]
runs = [dict(label='plain', config={DEMO!r}, cfg_options=['model.backbone.adaptor=None'],
             baseline=True),
        dict(label='stepnet', config={DEMO!r})]
'''
