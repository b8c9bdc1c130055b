# The real Fashion-MNIST (28x28 grey, 60k train / 10k test; tools/prepare_fashion_mnist.py
# writes it to data/fashion_mnist) for mmpretrain's ImageClassifier: batch 128 for
# training with a padded random crop and horizontal flips, batch 256 for validation and
# test, top-1 accuracy. The small configs of configs/demo, configs/alternet and configs/vit
# inherit it; change data_root with --cfg-options.
data_root = 'data/fashion_mnist'

# Fashion-MNIST pixel statistics (0.2860, 0.3530 on [0, 1]).
data_preprocessor = dict(num_classes=10, mean=[72.93], std=[90.02], to_rgb=False)
train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=2),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128, num_workers=2,
    dataset=dict(type='mmstiff.FashionMNIST', data_root=data_root, split='train', download=False,
                 pipeline=train_pipeline), sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=256, num_workers=2,
    dataset=dict(type='mmstiff.FashionMNIST', data_root=data_root, split='test', test_mode=True,
                 download=False, pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
