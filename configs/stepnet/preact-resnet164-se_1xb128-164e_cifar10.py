# Pre-activation ResNet-164 with an SE step-size adaptor in every block (SENet-164, the channel
# attention baseline of the StepNet paper): Δ = sigmoid(W2 relu(W1 GAP(f))), docs/methods.md §3.
# divisor=1 keeps the original SENet squeeze width C // 16 (4 channels in the first stage).
_base_ = ['./preact-resnet164_1xb128-164e_cifar10.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.SEAdaptor', ratio=16, divisor=1)))
