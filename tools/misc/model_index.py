"""Write ``configs/*/metafile.yml`` and ``model-index.yml``, the model index mim and MMEngine read.

One entry per config of ``configs/<folder>/`` (``_base_``, ``studies`` and the stiff-dynamics
``testbed`` excepted): its
collection and paper, training data, epochs and total batch size from the config, the
parameters and FLOPs measured here with :func:`mmengine.analysis.get_model_complexity_info` at
the paper's input size (224 for ImageNet, 32 for CIFAR, 96 for STL-10, 28 for Fashion-MNIST,
800x1333 for COCO), and the result the paper reports for that model, if it reports one, under a
metric name that ends in ``(paper)``: mmstiff ships no weights and has not reproduced these.
FLOPs count the model's ``extract_feat`` (backbone and neck, no head), as mmpretrain's
``get_flops`` does; they are multiply-adds, the papers' convention. Parameters are the whole
model's.

    python tools/misc/model_index.py            # measure every config, rewrite the files
    python tools/misc/model_index.py --check    # exit 1 if an index entry is missing or stale,
                                                # with an error: line after the list

``mim search mmstiff`` lists the index of an installed mmstiff; ``_base_ = 'mmstiff::...'``
resolves configs through the same ``.mim`` folder.
"""
import argparse
import glob
import os.path as osp
import re
import sys

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SKIP_FOLDERS = ('_base_', 'studies', 'testbed')

PAPERS = dict(
    stepnet=dict(Title='Understanding Self-attention Mechanism via Dynamical System Perspective',
                 URL='https://arxiv.org/abs/2308.09939'),
    antioversmoothing=dict(
        Title='Anti-Oversmoothing in Deep Vision Transformers via the Fourier Domain Analysis: '
        'From Theory to Practice', URL='https://arxiv.org/abs/2203.05962'),
    alternet=dict(Title='How Do Vision Transformers Work?', URL='https://arxiv.org/abs/2202.06709'),
)

#: collection name -> (paper, architecture, which configs: a regex on the config's stem, or None
#: for a collection of FOLDER_COLLECTIONS)
COLLECTIONS = {
    'StepNet': ('stepnet', ['StepNet', 'ResNet', 'Pre-activation ResNet'], r'^(preact-)?resnet\d+'),
    'StepNet ViT': ('stepnet', ['StepNet', 'Vision Transformer'], r'^vit-lite'),
    'StepNet Faster R-CNN': ('stepnet', ['StepNet', 'Faster R-CNN', 'FPN',
                                         'ResNet'], r'^faster-rcnn'),
    'AttnScale and FeatScale':
    ('antioversmoothing', ['AttnScale', 'FeatScale', 'DeiT', 'CaiT',
                           'Swin Transformer'], r'^(deit|swin|cait|vit-tiny)-'),
    'AlterNet':
    ('alternet', ['AlterNet', 'Local Multi-Head Self-Attention',
                  'Pre-activation ResNet'], r'^alternet'),
    # the configs of one folder (FOLDER_COLLECTIONS), no rule on the name
    'Steps on any backbone':
    ('stepnet',
     ['StepNet', 'SE', 'ConvNeXt', 'EfficientNet', 'MobileNetV2', 'DeiT III', 'PoolFormer'], None),
    'Fashion-MNIST zoo':
    ('stepnet',
     ['ResNet', 'Vision Transformer', 'ConvNeXt', 'MobileNetV2', 'EfficientNet',
      'PoolFormer'], None),
}

#: config folder -> its collection, for folders whose configs share a study rather than a
#: paper's method (their names would otherwise match a method's rule, e.g. ``resnet18``)
FOLDER_COLLECTIONS = {'zoo': 'Fashion-MNIST zoo', 'with_steps': 'Steps on any backbone'}

#: training-data tag of a config name -> (dataset, input size (H, W))
DATASETS = {
    'in1k': ('ImageNet-1k', (224, 224)),
    'cifar10': ('CIFAR-10', (32, 32)),
    'cifar100': ('CIFAR-100', (32, 32)),
    'stl10': ('STL-10', (96, 96)),
    'fashion-mnist': ('Fashion-MNIST', (28, 28)),
    'fashion-mnist-6400': ('Fashion-MNIST', (28, 28)),  # its first 6,400 training images
    'coco': ('COCO', (800, 1333)),
}

#: config stem -> the result its paper reports (metric, value, where)
PAPER_RESULTS = {
    # StepNet, Appendix G, Table 3: ViT trained from scratch (mean of 5 seeds)
    'vit-lite-7-p4_1xb128-200e_cifar10': ('Top 1 Accuracy', 89.08, 'StepNet, Table 3'),
    'vit-lite-7-p4-stepnet_1xb128-200e_cifar10': ('Top 1 Accuracy', 90.32, 'StepNet, Table 3'),
    'vit-lite-7-p4_1xb128-200e_cifar100': ('Top 1 Accuracy', 66.32, 'StepNet, Table 3'),
    'vit-lite-7-p4-stepnet_1xb128-200e_cifar100': ('Top 1 Accuracy', 68.88, 'StepNet, Table 3'),
    'vit-lite-7-p8_1xb128-200e_stl10': ('Top 1 Accuracy', 62.58, 'StepNet, Table 3'),
    'vit-lite-7-p8-stepnet_1xb128-200e_stl10': ('Top 1 Accuracy', 65.58, 'StepNet, Table 3'),
    # Anti-oversmoothing, Table 1 (the paper's own runs, trained from scratch)
    'deit-small-attnscale_4xb256_in1k': ('Top 1 Accuracy', 80.7, 'anti-oversmoothing, Table 1'),
    'deit-small-featscale_4xb256_in1k': ('Top 1 Accuracy', 80.9, 'anti-oversmoothing, Table 1'),
    'deit-small-24layer_4xb256_in1k': ('Top 1 Accuracy', 80.5, 'anti-oversmoothing, Table 1'),
    'deit-small-24layer-attnscale_4xb256_in1k':
    ('Top 1 Accuracy', 81.1, 'anti-oversmoothing, Table 1'),
    'deit-small-24layer-featscale_4xb256_in1k':
    ('Top 1 Accuracy', 81.3, 'anti-oversmoothing, Table 1'),
    'cait-s24_16xb64-400e_in1k': ('Top 1 Accuracy', 82.6, 'anti-oversmoothing, Table 1'),
    'cait-s24-attnscale_16xb64-400e_in1k': ('Top 1 Accuracy', 83.2, 'anti-oversmoothing, Table 1'),
    'cait-s24-featscale_16xb64-400e_in1k': ('Top 1 Accuracy', 83.2, 'anti-oversmoothing, Table 1'),
    'swin-small-attnscale_16xb64_in1k': ('Top 1 Accuracy', 83.4, 'anti-oversmoothing, Table 1'),
    'swin-small-featscale_16xb64_in1k': ('Top 1 Accuracy', 83.5, 'anti-oversmoothing, Table 1'),
}
#: config stem -> what its paper claims without an absolute number for it
PAPER_CLAIMS = {
    'faster-rcnn_r50-stepnet_fpn_1x_coco':
    '+2.9 box AP over faster-rcnn_r50_fpn_1x_coco (StepNet paper; no absolute AP given)',
    'vit-lite-7-p4-stepnet-replace_1xb128-200e_cifar10':
    'the literal reading of ViT+StepNet (docs/methods.md §13); StepNet, Table 3 reports 90.32 '
    'for its ViT+StepNet without saying which reading',
    'vit-lite-7-p4-stepnet-replace_1xb128-200e_cifar100':
    'the literal reading of ViT+StepNet (docs/methods.md §13); StepNet, Table 3 reports 68.88 '
    'for its ViT+StepNet without saying which reading',
    'vit-lite-7-p8-stepnet-replace_1xb128-200e_stl10':
    'the literal reading of ViT+StepNet (docs/methods.md §13); StepNet, Table 3 reports 65.58 '
    'for its ViT+StepNet without saying which reading',
}

HEADER = ('# Generated by tools/misc/model_index.py; edit that script, not this file.\n'
          '# Parameters and FLOPs (multiply-adds of backbone + neck) measured at the input\n'
          '# size shown; metrics ending in "(paper)" are the paper\'s, not reproduced by\n'
          '# mmstiff, which ships no weights.\n')


def config_files():
    """``configs/<folder>/<name>.py`` of every model config, relative to the repository."""
    found = []
    for path in sorted(glob.glob(osp.join(REPO, 'configs', '*', '*.py'))):
        folder = osp.basename(osp.dirname(path))
        if folder not in SKIP_FOLDERS:
            found.append(osp.relpath(path, REPO))
    return found


def collection_of(stem, folder=None):
    if folder in FOLDER_COLLECTIONS:
        return FOLDER_COLLECTIONS[folder]
    matches = [name for name, (_, _, rule) in COLLECTIONS.items() if rule and re.match(rule, stem)]
    if len(matches) != 1:
        raise ValueError(f'config {stem!r} matches the collections {matches}; expected exactly '
                         'one: extend COLLECTIONS in tools/misc/model_index.py')
    return matches[0]


def dataset_of(stem):
    tag = stem.rsplit('_', 1)[-1]
    if tag not in DATASETS:
        raise ValueError(f'config {stem!r} ends in the data tag {tag!r}; expected one of '
                         f'{sorted(DATASETS)}: extend DATASETS in tools/misc/model_index.py')
    return DATASETS[tag]


def sdpa_flops(inputs, outputs):
    """Multiply-adds of ``scaled_dot_product_attention``: ``Q Kᵀ`` and ``A V`` per head
    (MMEngine's counter does not know the fused operator and would count it as zero)."""
    from mmengine.analysis.jit_handles import get_shape
    query, key, value = (get_shape(x) for x in inputs[:3])
    batch = 1
    for n in query[:-2]:
        batch *= n
    return batch * query[-2] * key[-2] * (query[-1] + value[-1])


def measure(config):
    """Whole-model parameters and ``extract_feat`` FLOPs of ``config`` at its input size."""
    import torch
    from mmengine.analysis import FlopAnalyzer, parameter_count
    from mmengine.config import Config
    from mmengine.registry import MODELS, init_default_scope

    cfg = Config.fromfile(osp.join(REPO, config))
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    model = MODELS.build(cfg.model).eval()
    model.forward = model.extract_feat
    channels = cfg.model.get('backbone', {}).get('in_channels', 3)
    size = dataset_of(osp.splitext(osp.basename(config))[0])[1]
    with torch.no_grad():
        analyzer = FlopAnalyzer(model, (torch.rand(1, channels, *size), ))
        analyzer.set_op_handle('aten::scaled_dot_product_attention', sdpa_flops)
        analyzer.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        flops = analyzer.total()
    return cfg, int(parameter_count(model)['']), int(flops), size


def total_batch(cfg, stem):
    """Total batch size: GPUs of the name (``8xb32``) times the config's per-GPU batch."""
    match = re.search(r'_(\d+)xb(\d+)', stem)
    return int(match.group(1)) * cfg.train_dataloader.batch_size if match else None


def measured_results(results_dir=osp.join(REPO, 'docs', 'results')):
    """``{config: (mean top-1, seeds, study)}`` from the committed studies (``runs.json``):
    the test top-1 of every config trained as it is shipped (no option besides the seed),
    averaged over its finished seeds; the first study (by name) that has one wins."""
    import json
    found = {}
    for path in sorted(glob.glob(osp.join(results_dir, '*', 'runs.json'))):
        with open(path) as f:
            data = json.load(f)
        plain = {
            v['label']: v['config']
            for v in data['study']['variants']
            if not v['cfg_options'] and not data['study']['cfg_options']
        }
        values = {}
        for run in data['runs']:
            value = run['record']['metrics'].get('test/accuracy/top1')
            if run['status'] == 'done' and run['variant'] in plain and value is not None \
                    and not run.get('reused_from'):
                values.setdefault(plain[run['variant']], []).append(value)
        for config, accs in values.items():
            found.setdefault(config,
                             (round(sum(accs) / len(accs), 2), len(accs), data['study']['name']))
    return found


def model_entry(config, measured, results=None):
    cfg, params, flops, size = measured
    stem = osp.splitext(osp.basename(config))[0]
    dataset = dataset_of(stem)[0]
    task = 'Object Detection' if dataset == 'COCO' else 'Image Classification'
    metadata = {'Training Data': dataset, 'Input Size': 'x'.join(map(str, size))}
    epochs = cfg.train_cfg.get('max_epochs')
    if epochs:
        metadata['Epochs'] = int(epochs)
    batch = total_batch(cfg, stem)
    if batch:
        metadata['Batch Size'] = batch
    metadata.update(FLOPs=flops, Parameters=params)
    folder = osp.basename(osp.dirname(config))
    entry = {'Name': stem, 'In Collection': collection_of(stem, folder), 'Metadata': metadata}
    if stem in PAPER_RESULTS:
        metric, value, where = PAPER_RESULTS[stem]
        entry['Results'] = [{
            'Task': task,
            'Dataset': dataset,
            'Metrics': {
                f'{metric} (paper)': value
            }
        }]
        entry['Paper Result'] = where
    if stem in PAPER_CLAIMS:
        entry['Paper Claim'] = PAPER_CLAIMS[stem]
    if results and config in results:
        accuracy, seeds, study = results[config]
        entry.setdefault('Results', []).append({
            'Task': task,
            'Dataset': dataset,
            'Metrics': {
                'Top 1 Accuracy': accuracy
            }
        })
        entry['Reproduced'] = (f'mean of {seeds} seeds measured here: docs/results/{study}/')
    entry['Config'] = config
    return entry


def collection_entry(name):
    paper, architecture, _ = COLLECTIONS[name]
    return {'Name': name, 'Metadata': {'Architecture': architecture}, 'Paper': PAPERS[paper]}


def build_index(measure_fn=measure):
    """``{metafile path: content}`` and the model-index.yml content."""
    import yaml  # noqa: F401  (mmengine's dependency; checked before the slow part)

    by_folder = {}
    results = measured_results()
    for config in config_files():
        folder = osp.dirname(config)
        by_folder.setdefault(folder, []).append(model_entry(config, measure_fn(config), results))
    metafiles = {}
    for folder, models in by_folder.items():
        names = sorted({m['In Collection'] for m in models})
        metafiles[osp.join(folder,
                           'metafile.yml')] = dict(Collections=[collection_entry(n) for n in names],
                                                   Models=models)
    index = dict(Import=sorted(metafiles))
    return metafiles, index


def dump(data):
    import yaml
    return HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def check():
    """Structure only (no measuring): every config has one entry in the metafile of its folder,
    every entry names an existing config, and model-index.yml imports every metafile."""
    import yaml
    problems = []
    with open(osp.join(REPO, 'model-index.yml')) as f:
        imports = yaml.safe_load(f)['Import']
    entries = {}
    for metafile in imports:
        path = osp.join(REPO, metafile)
        if not osp.isfile(path):
            problems.append(f'model-index.yml imports {metafile}, which does not exist')
            continue
        with open(path) as f:
            for model in yaml.safe_load(f)['Models']:
                entries[model['Config']] = (metafile, model)
    for config in config_files():
        want = osp.join(osp.dirname(config), 'metafile.yml')
        if config not in entries:
            problems.append(f'{config} has no entry in {want}')
        elif entries[config][0] != want:
            problems.append(f'{config} is indexed in {entries[config][0]}, expected {want}')
    for config in sorted(set(entries) - set(config_files())):
        problems.append(f'{entries[config][0]} indexes {config}, which does not exist')
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--check', action='store_true',
                        help='only check that every config is indexed (no measuring)')
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:  # the list, then one line that says what to do, as run_tool ends a tool
            print(
                f'error: {len(problems)} problem(s) in the model index (listed above); '
                'expected every config indexed once: run python tools/misc/model_index.py to '
                'rewrite it', file=sys.stderr)
            return 1
        return 0
    import mmstiff  # noqa: F401  (registers mmstiff's types for the configs)
    metafiles, index = build_index(measure_fn=_measure_and_report)
    for path, content in metafiles.items():
        with open(osp.join(REPO, path), 'w') as f:
            f.write(dump(content))
    with open(osp.join(REPO, 'model-index.yml'), 'w') as f:
        f.write(dump(index))
    print(f'wrote model-index.yml and {len(metafiles)} metafiles')
    return 0


def _measure_and_report(config):
    measured = measure(config)
    print(
        f'{config}: {measured[1] / 1e6:.2f}M parameters, {measured[2] / 1e9:.3f}G FLOPs at '
        f'{measured[3]}', flush=True)
    return measured


if __name__ == '__main__':
    try:
        from mmstiff.tool_main import run_tool
    except ImportError:  # --check needs no mmstiff; measuring says what is missing
        sys.exit(main())
    sys.exit(run_tool(main))
