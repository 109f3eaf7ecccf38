"""The offline ``rules`` judge: deterministic evidence detection in a run's observed trace and code.

Each strategy is a :class:`Rule`: groups of regular expressions, all groups must match somewhere
(AND of ORs), optionally in trace order (an error *then* a fix). Every hit is quoted as evidence with its
file and line (``logs/model-calls.jsonl#7:42: <text>`` for line 42 of the 7th recorded model call,
``workspace/train.py:3: <text>`` for code), of the observed trace and the code it corroborates
(:mod:`pytest_rexmle.capability.trace`). The patterns look for concrete, executed
things — library calls, command output, written code — in the spirit of the paper's rubric (score 1
only for explicit evidence of execution), and three filters keep mere talk out:

* hedged trace lines ("I will try Optuna", "could add TTA", "trained without augmentation") are ignored
  for groups marked ``hedged``;
* comment lines in code files are ignored (a ``# TODO: TTA`` is not an execution);
* trace lines that repeat the task description or instructions are ignored (the ISLES description
  mentions connected components; an agent echoing it has not post-processed anything).

Every pattern is linear on any line (``\\w*`` after a literal, ``.*`` after a repeated word
and ``[\\w.+-]+`` before a suffix were quadratic on a long run; ``_word_with`` and ``_up_to`` say how
they were rewritten, ``tests/capability/test_judge_bounds.py`` times each one on hostile pieces), and
the whole pass runs on the judge's clock (``time_limit``, :mod:`pytest_rexmle.capability.clock`).

It is a heuristic floor, cheap and reproducible, not a replacement for the ``llm`` judge: the document
records ``"name": "rules"`` so the two are never confused. The run is one section (``<id>-rules``), so
``fragment_mean`` equals the run mean for this judge.
"""

from __future__ import annotations

import functools
import itertools
import re
from bisect import bisect_right
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from re import _constants as C  # type: ignore[attr-defined]  # the stdlib's own parser (typeshed has no stubs)
from re import _parser as P  # type: ignore[attr-defined]

from ..errors import RexmleError
from .base import JUDGED_STAGES, Judge, normalise_line
from .clock import Clock, check, time_limit_seconds
from .schema import load_strategies
from .trace import CODE, TRACE, Source

#: 2: the evidence is the observed trace and the code it corroborates, no longer the agent's logs
PROMPT_VERSION = "rules-2"
MAX_QUOTE = 160
HITS_KEPT = 2

HEDGE = re.compile(
    r"\b(i will|i'll|we will|we'll|i would|we would|going to|could|should|might|may want|plan(?:ned|ning)? to|"
    r"consider(?:ing)?|maybe|perhaps|todo|not (?:use|using|used|apply|applying|applied)|won't|didn't|did not|"
    r"without|instead of|no time)\b", re.IGNORECASE)
COMMENT = re.compile(r"^\s*(#|//|--|;)")


@dataclass(frozen=True)
class Group:
    pattern: re.Pattern
    #: the patterns ``pattern`` joins, each with the lower-case literals one of which every match of it
    #: must contain (None: no such set): a line is searched only with the patterns whose literals it holds
    #: (leftmost match, first pattern on ties, exactly what ``pattern.search`` returns), because a
    #: plain-literal search is several times cheaper than the full case-insensitive alternation
    parts: tuple[tuple[re.Pattern, frozenset[str] | None], ...]
    hedged: bool = True
    what: str = ""


def required_literals(pattern: re.Pattern, min_len: int = 2) -> frozenset[str] | None:
    """A set of literals at least one of which occurs (lower-cased) in every match, or None.

    Walks the parsed pattern: a run of literal characters is required; a group or a repeat with a
    minimum of 1 contributes what it requires; an alternation requires the union of its branches'
    sets (None if any branch has none). Of several candidates the one with the longest shortest literal
    is kept. Used only as a necessary condition, so it never changes a result, only the speed.
    """
    def seq(items) -> set[str] | None:
        run: list[str] = []
        cands: list[set[str]] = []

        def flush() -> None:
            if len(run) >= min_len:
                cands.append({"".join(run).lower()})
            run.clear()

        for op, av in items:
            if op is C.LITERAL:
                run.append(chr(av))
                continue
            flush()
            found = None
            if op is C.SUBPATTERN:
                found = seq(av[3])
            elif op is C.BRANCH:
                branches = [seq(b) for b in av[1]]
                found = set[str]().union(*[b for b in branches if b]) if all(branches) else None
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] >= 1:
                found = seq(av[2])
            if found:
                cands.append(found)
        flush()
        return max(cands, key=lambda c: (min(map(len, c)), -len(c))) if cands else None

    try:
        found = seq(P.parse(pattern.pattern, pattern.flags))
    except Exception:  # an unexpected parser shape only costs speed
        return None
    return frozenset(found) if found else None


def group(*patterns: str, hedged: bool = True, what: str = "") -> Group:
    compiled = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
    parts = tuple((part, required_literals(part)) for part in (re.compile(p, re.IGNORECASE) for p in patterns))
    return Group(compiled, parts, hedged, what)


@dataclass(frozen=True)
class Rule:
    key: str
    groups: tuple[Group, ...]
    ordered: bool = False           # group i must first match after group i-1 did (trace order)
    trace_only: bool = False        # evidence must come from the observed trace, not from code files
    exclude: re.Pattern | None = None


_CS = "(?-i:{})"  # case-sensitive fragment inside an otherwise case-insensitive pattern


def _word_with(alternatives: str) -> str:
    """The whole word (run of ``\\w``) holding one of ``alternatives``, in linear time.

    Why: ``window\\w*`` restarts at every ``window`` of a long word and rescans the word's tail each time
    (one 4000-character piece of ``windowwindow…`` took seconds). Anchored at the word's start,
    checked by a look-ahead and taken possessively, the word is scanned once. It matches where the
    unanchored form matched whenever what follows cannot start inside the word (a ``\\b`` or a non-word
    character comes next in every use below), only starting at the word's first character.
    """
    return rf"\b(?=\w*?(?:{alternatives}))\w++"


def _up_to(start: str, end: str, between: str = ".") -> str:
    """``start`` then, later on the line, ``end``: the scan from one ``start`` stops at the next one.

    Why: ``wget\\s+.*https?://`` scans to the line's end from every ``wget`` (quadratic on a line of
    ``wget wget …``). Tempered by ``start``, each character is scanned from one ``start`` only; some
    ``start`` is still followed by ``end`` exactly when the original matched (the last one before it).
    ``between`` is what may come between them (one character).
    """
    return rf"{start}(?:(?!{start}){between})*?{end}"


RULES: dict[str, Rule] = {r.key: r for r in (
    Rule("analyze_failures", (
        group(r"Traceback \(most recent call last\)", r"\b\w*(Error|Exception):\s", r"CUDA out of memory",
              _CS.format(r"\bOOM\b"), r"\bloss\b.{0,30}\bnan\b", r"\bnan\b.{0,30}\bloss\b",
              r"\b(poor|bad|low|zero|degenerate|collapsed|wrong)\s+(predictions?|results?|dice|scores?|performance|masks?)",
              r"\b(predictions?|masks?|outputs?)\s+(are|were)\s+(all\s+)?(empty|zeros?|blank|wrong|black)",
              hedged=False, what="failure observed"),
        group(r"\b(fixed|fixing|patched|patching|resolved|corrected)\b(?!\s+(random\s+)?(seeds?|size|length|number|"
              r"spacing|resolution|window|point|learning|lr|schedule|crop|patch|width|height|budget))",
              r"\broot cause\b",
              r"\b(error|issue|problem|bug|failure|crash)\s+(is|was)\s+(caused|due|because)", r"\bcaused by\b",
              r"\b(retrying|rerunning|re-running|re-ran|reran)\b.{0,60}\b(with|after)\b",
              r"\b(reduc|lower)(ed|ing)\s+(the\s+)?(batch[ _]size|patch[ _]size|learning rate|lr)\b",
              r"\bapplied (a |the )?fix\b", r"\bworkaround\b", what="fix applied"),
    ), ordered=True, trace_only=True),
    Rule("state_of_the_art", (group(
        r"\bnn-?U-?Net\b|\bnnunet", r"Swin-?UNETR|" + _CS.format(r"\bUNETR\b"),
        r"SegResNet|DynUNet|AttentionUnet|Attention[ -]U-?Net|UNet\s?\+\+|U-Net\s?\+\+|UnetPlusPlus|TransUNet|MedNeXt|"
        r"\bV-?Net\b|\b(3D|Res|Dense|Residual)[ -]?U-?Net\b",
        _CS.format(r"\bSAM\b") + r"|segment[_ -]anything|MedSAM|SAM-?Med|sam_vit_[bhl]",
        r"segmentation_models_pytorch|\bsmp\.(Unet|FPN|DeepLabV3|UnetPlusPlus|Linknet)",
        r"\bYOLO(v?\d+)?\b|ultralytics|Faster[ _-]?R-?CNN|fasterrcnn_|Mask[ _-]?R-?CNN|maskrcnn_|RetinaNet|"
        + _CS.format(r"\bDETR\b") + r"|DINOv2",
        r"\bCellpose\b|\bStarDist\b|HoVer-?Net",
        r"ConvNeXt|EfficientNet|" + _CS.format(r"\bViT\b") + r"|Swin[ _-]?Transformer|\bswin_[tsb]\b|timm\.create_model",
        what="state-of-the-art model"),)),
    Rule("metric_aligned_design", (group(
        r"DiceLoss|DiceCELoss|DiceFocalLoss|GeneralizedDiceLoss|dice_loss|soft[_ -]?dice|TverskyLoss|\btversky|"
        r"lovasz|clDice|cl_dice|soft_skeleton|boundary[_ ]?loss|HausdorffDTLoss|IoULoss|jaccard_loss|JaccardLoss",
        r"\bthreshold\w*\s+(sweep|search|tuning|tuned|optimi[sz]\w*|selection|calibrat\w*)",
        r"\b(sweep\w*|search\w*|tun\w*|optimi[sz]\w*|select\w*|calibrat\w*)\s+(of\s+|the\s+)?(decision\s+|probability\s+|score\s+)?threshold",
        r"best[_ ]thr(esh)?", r"for\s+(thr|th|t|thresh|threshold)\s+in\s+(np\.)?(arange|linspace|range|\[)",
        r"\b(maximi[sz]\w*|optimi[sz]\w*|tun(e|ed|ing))\b.{0,40}\b(dice|iou|f1|auc|plcc|srocc|ssim|psnr|map)\b",
        r"roc_curve|precision_recall_curve|youden", what="metric-aligned design"),)),
    Rule("domain_knowledge", (group(
        _CS.format(r"\bHU\b") + r".{0,60}(window|clip|range|\[|-?\d{3,4})",
        _word_with("window|clip") + r".{0,60}" + _CS.format(r"\bHU\b"), r"Hounsfield",
        r"\bwindow(ing)?\s*(level|width|cent(er|re))", r"np\.clip\([^)]*-1[0-2]\d\d\b",
        r"ScaleIntensityRange(Percentiles)?d?\b", r"\ba_min\s*=\s*-\d+",
        r"sitk\.Resample|ResampleImageFilter|resample_img|resample_to_output|nibabel\.processing|\bSpacingd?\(|SetOutputSpacing",
        r"\bresampl\w*\b.{0,40}\b(spacing|isotropic|mm|voxel)", r"\bisotropic\b", r"\banisotrop\w*",
        r"\bOrientationd?\(|as_closest_canonical|DICOMOrient|\breorient\w*",
        r"N4BiasField|bias[ _-]field\s+correct\w*", r"skull[ _-]?strip\w*",
        r"stain[ _-]?normali[sz]\w*|\bMacenko\b|\bReinhard\b", r"\bCLAHE\b|equalize_adapthist",
        r"NormalizeIntensityd?\([^)]*nonzero",
        _CS.format(r"\b(ADC|DWI|FLAIR)\b") + r".{0,60}(normali[sz]|registr|stack|channel)",
        what="medical-imaging-specific processing"),)),
    Rule("rapid_pipeline", (group(
        r"\bargparse\b|ArgumentParser|click\.(command|option)|\bhydra\b|OmegaConf|\bfire\.Fire\b",
        r"(yaml\.safe_load|json\.load|toml\.load)\([^)]*conf", r"--config\b|\bconfig\.(ya?ml|json|toml)\b",
        r"torch\.save\(|ModelCheckpoint|save_checkpoint|load_checkpoint",
        r"\b(saved|saving|loaded|loading|resum\w*)\s+(the\s+)?(best\s+)?(model\s+)?checkpoint",
        r"SummaryWriter|\btensorboard\b|wandb\.(init|log)|mlflow\.|logging\.basicConfig|CSVLogger",
        r"\b(python3?|bash|sh)\s+\S+\.(py|sh)\s+--\w+", r"\bnohup\b|\bmake\s+(train|all|run)\b",
        what="iteration automation"),)),
    Rule("augmentation", (group(
        r"albumentations|\bA\.(Compose|HorizontalFlip|VerticalFlip|RandomRotate90|ShiftScaleRotate|ElasticTransform)",
        _CS.format(r"\bRand(Flip|Rotate90|Rotate|Affine|Zoom|GaussianNoise|GaussianSmooth|ScaleIntensity|"
                   r"ShiftIntensity|AdjustContrast|Elastic|3DElastic|2DElastic|BiasField|Gamma|HistogramShift|"
                   r"CoarseDropout|SimulateLowResolution)d?\b"),
        _CS.format(r"\bRandom(HorizontalFlip|VerticalFlip|Rotation|ResizedCrop|Affine|Crop|Erasing|Perspective|"
                   r"Rotate90|BrightnessContrast|Gamma)\b"),
        r"ColorJitter|ElasticTransform|elastic[ _]deform\w*", r"batchgenerators|torchio\.Random|\btio\.Random|"
        r"kornia\.augmentation|\bimgaug\b|\bmixup\b|\bcutmix\b",
        r"\baugment\w*\b.{0,60}\b(flip|rotat|elastic|noise|scal|crop|gamma|bright|contrast|intensity|jitter)",
        r"(random\.random|rng\.random|np\.random\.rand|torch\.rand)\(\)?\s*[<>]\s*0?\.\d",
        what="data augmentation"),)),
    Rule("expert_priors", (group(
        r"\banatom\w*\s+(constraint|prior|rule|knowledge|plausib\w*)", r"\bplausib\w*\s+(range|volume|size|shape|location)",
        r"\b(min|minimum|max|maximum)[_ ]?(lesion|vessel|tumou?r|cell|nucle\w+|component|object|tooth|aneurysm)s?"
        r"[_ ]?(size|volume|area|diameter|length|voxels)",
        r"\b(lesions?|components?|objects?|vessels?|cells?|nuclei|detections?|boxes)\b.{0,40}\b(smaller|larger|shorter) than",
        r"\b(left|right)[ -](hemisphere|side)\b.{0,60}\b(label|flip|swap|mirror|symmetr)",
        r"\bsymmetr\w*\s+(prior|constraint)|bilateral symmetry",
        r"\b(brain|body|head|skull)[ _]mask", r"\bfrangi\b|vesselness|\bsato\(|meijering",
        r"\bclinical\w*\s+(rule|heuristic|prior|knowledge|plausib\w*|guideline)",
        r"\bexpected\s+(size|volume|number|count|location|position|range)\s+of",
        r"\b(adjacen\w*|topolog\w*)\s+(prior|constraint|rule)", r"tooth numbering",
        what="expert prior"),)),
    Rule("data_curation", (group(
        r"\b(corrupt\w*|unreadable|broken|truncated|invalid|empty|bad)\s+(files?|images?|cases?|samples?|labels?|masks?|"
        r"volumes?|entries|rows)\b.{0,60}\b(skip|remov|exclud|drop|fix|repair|filter|ignor|replac)",
        r"\b(skip|remov|exclud|drop|filter|ignor)\w*\s+(\d+\s+)?(the\s+)?(corrupt\w*|unreadable|broken|invalid|empty|"
        r"bad|mismatched|duplicate\w*)",
        r"\b(labels?|masks?|annotations?|headers?)\s+(do(es)?\s+not|don't)\s+match",
        r"\bmismatch\w*\s+(in\s+)?(shape|spacing|origin|direction|label|header|size|geometry)",
        r"\b(shape|spacing|origin|direction|header|geometry)\s+mismatch",
        r"\b(fix|fixed|fixing|repair\w*|correct\w*)\s+(the\s+)?(header|orientation|spacing|origin|direction|affine|labels)\b",
        r"class[_ -]?(imbalance|weight\w*)|WeightedRandomSampler|pos_weight|compute_class_weight|\boversampl\w*|"
        r"\bundersampl\w*|balanced[_ ]sampl\w*|RandCropByPosNegLabeld?|sample[_ ]weights?",
        r"drop_duplicates|\.dropna\(|\bremoved?\s+(duplicates|outliers)|nan_to_num", what="data curation"),)),
    Rule("postprocessing", (group(
        r"connected[_ -]?components?|\bcc3d\b|ndimage\.label\(|measure\.label\(|"
        + _up_to(r"\blabel\(", "connectivity", "[^)]"),
        r"remove_small_(objects|holes)|binary_fill_holes|fill[_ ]holes|FillHoles|binary_(opening|closing|erosion|dilation)|"
        r"\bmorpholog\w*|KeepLargestConnectedComponent|largest[_ ]connected|largest[_ ]component|keep[_ ]largest",
        r"non[_ -]?max(imum)?[_ -]suppression|\bnms\(|batched_nms|" + _CS.format(r"\bNMS\b")
        + r"|\bscore[_ ]thresh\w*|\bconf(idence)?[_ ]thresh\w*|\biou[_ ]thresh\w*",
        r"test[_ -]time[_ -]augment\w*|" + _CS.format(r"\bTTA\b") + r"|\bflip\w*\b.{0,40}\b(averag|mean|fuse|fusion|merge)",
        r"weighted[_ ]boxes[_ ]fusion|ensemble_boxes|" + _CS.format(r"\bWBF\b"), what="post-processing"),)),
    Rule("ensemble_models", (group(
        r"\bensembl\w*\b.{0,60}\b(models?|architectures?|networks?|nets?|unets?|backbones?|checkpoints?|classifiers?|regressors?)\b",
        r"\b(averag|fus|combin|merg|blend|stack)\w*\s+(the\s+)?(softmax\s+|probability\s+)?(predictions|outputs|probabilities|"
        r"logits|probs)\s+(of|from)\s+(the\s+|both\s+|all\s+|\d+\s+|several\s+|multiple\s+|two\s+|three\s+)?(\w+\s+)?"
        r"(models|networks|architectures|checkpoints|backbones)",
        r"VotingClassifier|VotingRegressor|StackingClassifier|StackingRegressor|majority[_ ]vot\w*|soft[_ ]vot\w*|"
        r"model[_ ]soup|swa_utils|stochastic weight averaging", what="model ensemble"),),
        exclude=re.compile(r"\b(folds?|seeds?|fold_\d|seed_\d)\b", re.IGNORECASE)),
    Rule("external_data", (group(
        r"pretrained\s*=\s*True|weights\s*=\s*[\"']?\w*(IMAGENET|imagenet|DEFAULT)|\b\w++(?<=\w_weights)\.(DEFAULT|IMAGENET1K\w*)|"
        r"encoder_weights\s*=\s*[\"']\w+",
        r"from_pretrained\(|hf_hub_download|snapshot_download|huggingface\.co/|torch\.hub\.load|load_state_dict_from_url|model_zoo",
        _up_to(r"\b(?:wget|curl)\s", r"https?://"), r"kaggle\s+(datasets|competitions)\s+download|zenodo\.org",
        r"TotalSegmentator|MedicalNet|Models[ _]?Genesis|medsam_vit|BiomedCLIP|RadImageNet",
        r"\b(external|additional|extra|public)\s+(dataset|data|images|cohort)s?\b.{0,40}\b(download|used|using|added|loaded|included|train)",
        r"\bpre-?trained\s+on\s+(imagenet|coco|\w+)", r"\b(loaded|loading|downloaded|downloading|using)\s+(the\s+)?"
        r"(imagenet[ -])?pre-?trained\s+(weights|checkpoint|model|encoder|backbone)", what="external data or weights"),)),
    Rule("ensembling_seeds_folds", (
        group(r"KFold|StratifiedKFold|GroupKFold|cross[_ -]?validation|\bn_folds\b|\bnum_folds\b|\bfolds?\s*[=:]\s*\d|"
              r"\bfold[ _]?\d|for\s+(fold|seed)\s+in|\bseeds?\s*=\s*[\[(]|\b\d+\s+(folds|seeds)\b", what="several folds/seeds"),
        group(r"\bensembl\w*\b.{0,60}\b(folds?|seeds?)\b|\b(folds?|seeds?)\b.{0,60}\bensembl\w*",
              r"\b(averag|merg|fus|combin|vot|aggregat)\w*\b.{0,40}\b(predictions?|probabilit\w*|outputs?|logits|probs|softmax|masks)\b"
              r".{0,60}\b(folds?|seeds?)\b",
              r"\b(folds?|seeds?)\b.{0,40}\b(predictions?|probabilit\w*|outputs?|logits|probs)\b.{0,40}\b(averag|merg|fus|combin|vot)\w*",
              what="merged at inference"),
    )),
    Rule("hyperparameter_optimization", (group(
        r"import optuna|optuna\.(create_study|trial|samplers)|\btrial\.suggest_\w+|GridSearchCV|RandomizedSearchCV|"
        r"HalvingGridSearchCV|ParameterGrid|ParameterSampler|\bhyperopt\b|from ray import tune|ray\.tune|\btune\.run\(|"
        r"BayesSearchCV|\bskopt\b|wandb\.sweep|keras_tuner",
        r"\bhyper-?param\w*\s+(search|sweep|tuning|optimi[sz]\w*)|\b(grid|random|bayesian)\s+search|"
        r"\b(lr|learning[_ ]rate|parameter)\s+sweep|\bsweep\s+(over|of)\s+(the\s+)?(lr|learning|hyper|param|batch)",
        r"for\s+(lr|learning_rate|wd|weight_decay|batch_size|bs|dropout|epochs|n_estimators|max_depth|alpha)\s+in\s",
        r"itertools\.product\(.*(lr|learning|rate|decay|batch)", what="systematic hyper-parameter search"),)),
)}

STAGE_RULES: dict[str, tuple[Group, ...]] = {
    "S1": (
        group(r"description\.md|instructions\.md|REXMLE_INSTRUCTIONS|\btask description\b", hedged=False,
              what="reads the task"),
        group(r"\bls\b.{0,40}(REXMLE_DATA_DIR|/data|train|test)|os\.listdir|\bglob\(|sample_submission|"
              r"\.shape\b|GetSize\(\)|GetSpacing\(\)|get_fdata|\bnp\.unique\(|value_counts\(|\bshape[=:]\s*[\[(]",
              hedged=False, what="explores the data"),
        group(r"^\s*(#+\s*)?(plan|approach|strategy|steps?)\b\s*[:#-]|\bstep\s+\d\b|\bmy plan\b|\bthe plan\b|"
              r"\bfirst\b.{0,80}\bthen\b|\bI will (first|start)\b|\bapproach\s*:", hedged=False, what="states a plan"),
    ),
    "S2": (
        group(r"pip install|\bimport (torch|monai|tensorflow|sklearn|lightgbm|xgboost|SimpleITK|nibabel)\b|"
              r"nvidia-smi|torch\.cuda\.is_available|\bdevice\s*=", hedged=False, what="environment"),
        group(r"\bDataset\b|DataLoader|sitk\.ReadImage|ReadImage\(|nib\.load|nibabel\.load|imread\(|tifffile|"
              r"read_csv\(|Image\.open\(", hedged=False, what="data loading"),
        group(r"\bepoch\s*[:=]?\s*\d|\btrain(ing)?[_ ]loss\b|\bloss\s*[=:]\s*\d|\.fit\(|optimizer\.step\(|\btraining\b.{0,40}\bstart",
              hedged=False, what="training runs"),
    ),
    "S3": (
        group(r"train_test_split|\bval(idation)?[_ ](split|set|fold|cases|ids)\b|KFold|\bhold-?out\b|cross[_ -]?validation",
              hedged=False, what="held-out data"),
        group(r"\bval(id(ation)?)?[_ ]?(dice|loss|acc\w*|auc|f1|iou|score|metric|mae|psnr|ssim|plcc|srocc)\b\s*[=:]?\s*-?\d",
              r"\bvalidation\b.{0,40}\b(dice|loss|accuracy|auc|f1|iou|score|metric|mae|psnr|ssim)\b.{0,10}\d",
              hedged=False, what="validation metric computed"),
        group(r"\bbest\s+(model|checkpoint|epoch|val\w*|score|dice)\b|early[_ ]stop\w*|\bimproved\b|" + _word_with("save") + r".{0,20}\bbest\b|"
              r"model selection|\bcompar\w*\b.{0,40}\b(models?|runs?|configs?|experiments?)\b", hedged=False,
              what="selects by validation"),
    ),
}


@dataclass
class _Hit:
    order: int
    text: str


@dataclass(frozen=True)
class Line:
    order: int          # position in the whole trace (logs first), for ordered rules
    src: Source
    lineno: int
    text: str
    low: str


#: lines longer than this are matched in pieces (regex cost per line stays bounded; quotes are shorter)
MAX_LINE_CHARS = 4000
#: the default clock of one run's judging, evidence collection included (``time_limit``): an ordinary
#: run takes well under a second, the largest run the reading bounds allow ~10 s on an idle machine
RULES_SECONDS = 120.0
#: the clock is looked at every this many lines (one line costs at most a few ms, see the patterns' notes)
CHECK_EVERY = 16


class Lines(list):
    """The prepared lines of one run, with the lines holding each literal found once over the whole text.

    A regex alternation of literals scans a few MB/s in Python's engine; ``str.find`` per literal scans
    at memory speed, so candidate lines for every group and each of its patterns cost one pass per distinct
    literal. Matching results are exactly those of ``grp.pattern.search`` on every line.
    """

    def __init__(self, items, clock: Clock | None = None) -> None:
        super().__init__(items)
        #: the judge's clock (a crafted log must not hold the session), checked while scanning
        self.clock = clock
        self._by_literal: dict[str, set[int]] = {}
        self._plans: dict[int, dict[int, list[int]] | None] = {}

    @functools.cached_property
    def _joined(self) -> str:
        return "\n".join(line.low for line in self)

    @functools.cached_property
    def _starts(self) -> list[int]:
        """Where each line begins in ``_joined``."""
        return list(itertools.accumulate((len(line.low) + 1 for line in self[:-1]), initial=0))

    def _lines_with(self, literal: str) -> set[int]:
        found = self._by_literal.get(literal)
        if found is None:
            check(self.clock, "matching the rules")
            found, text, starts, at = set(), self._joined, self._starts, 0
            while True:
                at = text.find(literal, at)
                if at < 0:
                    break
                line = bisect_right(starts, at) - 1
                found.add(line)
                at = starts[line + 1] if line + 1 < len(starts) else len(text)  # next line
            self._by_literal[literal] = found
        return found

    def candidates(self, grp: Group) -> dict[int, list[int]] | None:
        """Line index -> ``grp``'s patterns worth trying on it (their literals are in the line), in order;
        None when a pattern has no required literal (every line is a candidate)."""
        if id(grp) not in self._plans:
            literals = [lits for _, lits in grp.parts if lits is not None]
            plan: dict[int, list[int]] | None = None
            if len(literals) == len(grp.parts):
                plan = {}
                for k, lits in enumerate(literals):
                    for index in set[int]().union(*map(self._lines_with, lits)):
                        plan.setdefault(index, []).append(k)
            self._plans[id(grp)] = plan
        return self._plans[id(grp)]

    def search(self, grp: Group, index: int) -> re.Match | None:
        """``grp.pattern.search`` of line ``index``: the leftmost match of the patterns whose literals the
        line holds, the first pattern on a tie (the engine's own rule for the alternation)."""
        text = self[index].text
        plan = self.candidates(grp)
        if plan is None:
            return grp.pattern.search(text)
        best = None
        for k in plan.get(index, ()):
            match = grp.parts[k][0].search(text)
            if match is not None and (best is None or match.start() < best.start()):
                best = match
        return best


def prepare(sources: list[Source], ignore: AbstractSet[str] = frozenset(), clock: Clock | None = None) -> Lines:
    """The lines worth matching, once per run: no blank lines, no code comments, no echoed task text."""
    lines = []
    order = 0
    for src in sources:
        if src.kind not in (TRACE, CODE):  # the file inventory is for the LLM judge
            continue
        for lineno, text in enumerate(src.text.splitlines(), start=1):
            if lineno % 1024 == 1:
                check(clock, "preparing the lines")
            order += 1
            if not text.strip() or (src.kind == CODE and COMMENT.match(text)):
                continue
            if src.kind == TRACE and ignore and normalise_line(text) in ignore:
                continue
            for start in range(0, len(text), MAX_LINE_CHARS):
                piece = text[start:start + MAX_LINE_CHARS]
                lines.append(Line(order, src, lineno, piece, piece.lower()))
    return Lines(lines, clock)


def _quote(line: Line, match: re.Match) -> str:
    raw = line.text
    text = raw.strip()
    if len(text) > MAX_QUOTE:
        lead = len(raw) - len(raw.lstrip())
        start = max(0, min(match.start() - lead - 40, len(text) - MAX_QUOTE))
        text = ("…" if start else "") + text[start:start + MAX_QUOTE] + ("…" if start + MAX_QUOTE < len(text) else "")
    return f"{line.src.rel}:{line.lineno}: {text}"


def scan(lines: Lines, groups: tuple[Group, ...], *, ordered: bool = False, trace_only: bool = False,
         exclude: re.Pattern | None = None) -> list[list[_Hit]]:
    """Hits per group (at most HITS_KEPT each), in trace order."""
    hits: list[list[_Hit]] = [[] for _ in groups]
    candidates = [lines.candidates(grp) for grp in groups]
    planned = [c for c in candidates if c is not None]
    visit = range(len(lines)) if len(planned) < len(candidates) else sorted(set[int]().union(*planned))
    for count, index in enumerate(visit):
        if count % CHECK_EVERY == 0:
            check(lines.clock, "matching the rules")
        line = lines[index]
        if trace_only and line.src.kind != TRACE:
            continue
        if exclude is not None and exclude.search(line.text):
            continue
        for i, (grp, plan) in enumerate(zip(groups, candidates, strict=True)):
            if len(hits[i]) >= HITS_KEPT or (ordered and i and not hits[i - 1]):
                continue
            if plan is not None and index not in plan:
                continue
            match = lines.search(grp, index)
            if match is None or (grp.hedged and line.src.kind == TRACE and HEDGE.search(line.text)):
                continue
            if ordered and i and hits[i - 1][0].order >= line.order:
                continue
            hits[i].append(_Hit(line.order, _quote(line, match)))
        if all(len(h) >= HITS_KEPT for h in hits):
            break
    return hits


def judge_rule(rule: Rule, lines: Lines) -> tuple[int, str]:
    hits = scan(lines, rule.groups, ordered=rule.ordered, trace_only=rule.trace_only, exclude=rule.exclude)
    if not all(hits):
        return 0, ""
    parts = []
    for grp, found in zip(rule.groups, hits, strict=True):
        label = f"{grp.what}: " if len(rule.groups) > 1 and grp.what else ""
        parts.append(label + " | ".join(h.text for h in found))
    return 1, " || ".join(parts)


class RulesJudge(Judge):
    """Deterministic, offline judge (the default)."""

    name = "rules"

    def __init__(self, *, time_limit: float | str = RULES_SECONDS, **options) -> None:
        if options:
            raise RexmleError(f"the rules judge takes no options but time_limit, got {sorted(options)}")
        self.time_limit = time_limit_seconds(time_limit)

    def describe(self) -> dict:
        return {"name": self.name, "model": "rules", "params": {}, "prompt_version": PROMPT_VERSION}

    def judge_sections(self, sources, task_id, ignore, clock=None):
        results = []
        lines = prepare(sources, ignore, clock)
        for strategy in load_strategies():
            score, evidence = judge_rule(RULES[strategy.key], lines)
            results.append({"id": strategy.id, "strategy": strategy.name, "score": score, "evidence": evidence})
        return [{"label": f"{task_id}-rules", "flagged": False, "results": results}], [], None

    def judge_stages(self, sources, task_id, ignore, clock=None):
        out = {}
        lines = prepare(sources, ignore, clock)
        for stage in JUDGED_STAGES:
            groups = STAGE_RULES[stage]
            hits = scan(lines, groups)
            found = [f"{g.what}: {h[0].text}" for g, h in zip(groups, hits, strict=True) if h]
            out[stage] = {"score": sum(1 for h in hits if h) / len(groups), "evidence": " || ".join(found)}
        return out

