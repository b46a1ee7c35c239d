"""Eval sets (docs/evalsets.md): backfill labelled review items into eval items, read a
layer in export order, write the deterministic export, score and store runs.

Services only flush; `actions` owns the transactions, the audit entries and the outbox.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from controlplane.catalog.service import no_task, runtimes, task_runtimes
from controlplane.compare.fingerprint import spec_digest
from controlplane.evalsets import items as evalitems
from controlplane.evalsets import repository, scoring
from controlplane.models import Task
from controlplane.models.evalsets import EvalItem, EvalRun
from controlplane.models.review import ReviewItem, ReviewLabel
from controlplane.review import repository as review_repository
from controlplane.review.labels import consensus, usable_answer


class NotFound(LookupError):
    """No such task or layer; the message says which."""


class Refused(ValueError):
    """A request that cannot be served as asked; the message names the field and why."""


class Conflict(Refused):
    """Refused for what the eval sets hold now (an empty layer, a run that answers other
    items than the layer's): the same request may pass later, so the API answers 409."""


# --- backfill ------------------------------------------------------------------------


@dataclass
class Backfilled:
    """What a backfill did: items added per task and layer (their ids in export order), and
    the done review items it left out and why."""

    added: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # Labelled both_wrong / unclear / wrong without a correction: no expected answer yet.
    needs_correction: int = 0
    # Their expected answer (a correction, or the right side's output) is one the task's
    # comparator does not even call `agree` with itself (an answer of the wrong shape, a
    # label outside the task's labels): no run could match it. They wait for a label with a
    # valid correction, like `needs_correction`.
    invalid_expected: int = 0
    # Same normalised input as an eval item already in that layer of the task's sets (the
    # same input may sit in `boundary` and `regression`: the regression layer always runs).
    duplicates: int = 0
    # Eval items whose review item's labels changed since they were made: made again from
    # the labels that stand now (a correction) ...
    remade: int = 0
    # ... or taken out of their layer, their review item reopened (it waits for another
    # reviewer) or left without a usable expected answer; a later backfill puts them back.
    withdrawn: int = 0
    # (task, layer) of every item added, remade or withdrawn: whose digest to keep again.
    touched: set[tuple[str, str]] = field(default_factory=set)

    def changed_layers(self, task: str) -> set[str]:
        return {layer for name, layer in self.touched if name == task}

    @property
    def count(self) -> int:
        return sum(len(ids) for layers in self.added.values() for ids in layers.values())

    def view(self) -> dict[str, Any]:
        return {
            "added": self.count,
            "tasks": {
                task: {layer: len(ids) for layer, ids in sorted(layers.items())}
                for task, layers in sorted(self.added.items())
            },
            "needs_correction": self.needs_correction,
            "invalid_expected": self.invalid_expected,
            "duplicates": self.duplicates,
            "remade": self.remade,
            "withdrawn": self.withdrawn,
        }


def _stamp(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _label_view(label: ReviewLabel) -> dict[str, Any]:
    return {
        "id": label.id,
        "reviewer": label.reviewer,
        # Resolved to the sides; the A/B verdict as given is left out: it only means
        # something with the item's hidden, randomly drawn order.
        "resolved": label.resolved,
        "failure_class": label.failure_class,
        "corrected": label.corrected,
        "note": label.note,
    }


def eval_values(
    task: Task, item: ReviewItem, labels: Sequence[ReviewLabel]
) -> dict[str, Any] | None:
    """The eval item a done review item becomes (column values), or None when its labels
    give no expected answer (both_wrong / unclear / wrong without a correction)."""
    agreed = consensus(labels)
    if agreed is None:
        return None
    ok, expected = evalitems.expected_answer(
        agreed.resolved,
        corrected=agreed.corrected,
        edge_output=item.edge_output,
        cloud_output=item.cloud_output,
    )
    if not ok:
        return None
    counted = set(agreed.label_ids)
    provenance: dict[str, Any] = {
        "result_id": item.result_id,
        "request_id": item.request_id,
        "review_item_id": item.id,
        "policy": item.policy,
        "reason": item.reason,
        "kind": item.kind,
        "inclusion_probability": item.inclusion_probability,
        "consensus": agreed.resolved,
        # Every label, superseded ones too (labels are never edited); `counted` marks the
        # votes the consensus read.
        "labels": [{**_label_view(x), "counted": x.id in counted} for x in labels],
        "reviewers": list(agreed.reviewers),
        "comparator": item.comparator,
        "comparator_version": item.comparator_version,
        "config_version": item.config_version,
        "flag_version": item.flag_version,
        "window_start": _stamp(item.window_start),
        "result_ts": _stamp(item.result_ts),
        "decision": item.decision,
        "served": item.served,
        "outcome": item.outcome,
        "edge_error": item.edge_error,
        "edge_model": item.edge_model,
        "cloud_model": item.cloud_model,
    }
    if item.layer == "regression" and item.provenance:
        provenance["regression"] = item.provenance
    tags = sorted({item.reason, item.kind, f"consensus:{agreed.resolved}"})
    return {
        "item_id": evalitems.item_id(task.name, item.input),
        "task_id": task.id,
        "layer": item.layer,
        "input": item.input,
        "expected": expected,
        "edge_output": item.edge_output,
        "cloud_output": item.cloud_output,
        "bucket": item.bucket,
        "failure_class": agreed.failure_class,
        "tags": tags,
        "provenance": provenance,
        "review_item_id": item.id,
    }


def _specs(session: Session) -> dict[int, dict[str, Any]]:
    """Task id → the comparator spec of its current (parsing) config."""
    return {task_id: found[1].comparator_spec for task_id, found in runtimes(session).items()}


def matchable(spec: Mapping[str, Any] | None, expected: Any) -> bool:
    """Whether a run could ever be right on this expected answer: the task's comparator
    calls it `agree` with itself (an answer it calls invalid, or does not compare, never
    agrees with anything). Without a parsing config there is nothing to judge by: True."""
    return spec is None or scoring.is_right(spec, expected, expected)


def backfill(session: Session, *, task: str | None = None, layer: str | None = None) -> Backfilled:
    """Turn every done review item (of the task, of the layer) that has no eval item yet
    into one in its layer, oldest first; skip those whose input that layer already holds and
    those whose labels need a correction first (no expected answer yet, or one the task's
    comparator calls invalid). Safe to run again: it adds only what is new."""
    if layer is not None and layer not in evalitems.LAYERS:
        raise Refused(f"layer: {layer!r} is not one of {', '.join(evalitems.LAYERS)}")
    tasks = repository.tasks_by_name(session, task)
    if task is not None and not tasks:
        raise NotFound(no_task(task))
    report = Backfilled()
    specs = _specs(session)
    layers = [layer] if layer is not None else list(evalitems.LAYERS)
    for one in tasks:
        with _writing(session, one, layers, report):
            follow_labels(session, one, layer, specs.get(one.id), report)
            candidates = repository.done_items_not_backfilled(session, one.id, layer)
            _add(session, one, candidates, specs.get(one.id), report)
    return report


@contextmanager
def _writing(
    session: Session, task: Task, layers: Sequence[str], report: Backfilled
) -> Iterator[None]:
    """Around a change to the task's layers: their digest rows locked first (in one order,
    so writers of one layer take turns), and after it the digest of each layer it changed
    (or that has none yet) kept, in this transaction."""
    layers = sorted(set(layers))
    # The task's row first, as every writer of the task takes it (an unblock or a rollback
    # holds it for update, then reaches the digest): an eval item's insert takes it too
    # (its foreign key), so taking it after a digest row deadlocked with them.
    repository.share_task(session, task.id)
    for layer in layers:
        repository.lock_digest(session, task.id, layer)
    before = report.changed_layers(task.name)
    yield
    changed = report.changed_layers(task.name) - before
    for layer in layers:
        if layer in changed or repository.digest_of(session, task.id, layer) is None:
            found = layer_items(session, task, layer)
            repository.keep_digest(session, task.id, layer, _digest(task.name, found), len(found))


def _digest(task: str, found: Sequence[EvalItem]) -> str:
    """sha256 of the layer's JSONL export (the manifest's hash of that file)."""
    return evalitems.sha256(evalitems.jsonl(evalitems.line(x, task) for x in found))


def follow_labels_of(
    session: Session, task: Task, layer: str, spec: Mapping[str, Any] | None
) -> Backfilled:
    """`follow_labels` on one layer as a change of its own (its digest kept after it)."""
    report = Backfilled()
    with _writing(session, task, [layer], report):
        follow_labels(session, task, layer, spec, report)
    return report


def follow_labels(
    session: Session,
    task: Task,
    layer: str | None,
    spec: Mapping[str, Any] | None,
    report: Backfilled,
) -> None:
    """Eval items follow their review item's labels: an item whose review item was reopened
    by a correction, or whose labels no longer give a usable expected answer, leaves its
    layer; one whose labels give another answer now is made again from them. A set never
    keeps an answer its reviewers took back (and its hash changes, so runs on it are old)."""
    outdated = repository.outdated_items(session, task.id, layer)
    if not outdated:
        return
    labels = repository.labels_of(session, [review.id for _, review in outdated])
    for item, review in outdated:
        values = (
            eval_values(task, review, labels.get(review.id, [])) if review.state == "done" else None
        )
        report.touched.add((task.name, item.layer))
        if values is None or not matchable(spec, values["expected"]):
            session.delete(item)
            report.withdrawn += 1
            if item.layer == "regression":
                # Out of the set again: a block waits on it, and each pass reads it.
                review_repository.restore_priority(session, [review.id])
            continue
        for column in ("expected", "failure_class", "tags", "provenance"):
            setattr(item, column, values[column])
        report.remade += 1
    session.flush()


def fill_regression(
    session: Session, task: Task, item_ids: Sequence[int] | None = None, *, waited: bool = False
) -> Backfilled:
    """Backfill the task's done review items of the `regression` layer (of those ids; all
    when None) that its eval set does not hold yet, as `backfill` does, in the caller's
    transaction: a rollback moving a labelled item into that layer, and each pass
    (`fill_waiting`), put them in the set with no backfill run by hand. Reads the task's
    comparator from its stored config."""
    report = Backfilled()
    if item_ids is not None and not item_ids:
        return report
    runtime = task_runtimes(session, {task.name}).get(task.name)
    spec = runtime.comparator_spec if runtime is not None else None
    with _writing(session, task, ["regression"], report):
        follow_labels(session, task, "regression", spec, report)
        candidates = repository.done_items_not_backfilled(
            session, task.id, "regression", item_ids, waited=waited
        )
        _add(session, task, candidates, spec, report)
    if candidates:
        # Those whose input the set now holds (their own eval item, or another item's with
        # the same input: a duplicate can never be added) are waited on by no block: the
        # queue and the next passes treat them as any other item.
        inputs = {c.id: evalitems.item_id(task.name, c.input) for c in candidates}
        held = repository.existing_ids(session, sorted(set(inputs.values())), "regression")
        review_repository.drop_priority(session, [i for i, key in inputs.items() if key in held])
    return report


def fill_waiting(session: Session) -> int:
    """Each pass: the labelled regression items an active block waits on into their task's
    `regression` eval set (`fill_regression`), so that layer fills from reviewers' labels
    alone for the gate. An item whose input the set holds leaves the regression priority
    there, so the next passes read only items still waiting for a usable expected answer,
    and only while a block of their task is active; and every blocked task's regression
    items follow their labels (`follow_labels`: a correction reaches the set the gate
    reads without a backfill by hand). Returns how many eval items it added."""
    added = 0
    specs = _specs(session)
    for task in repository.blocked_tasks(session):
        follow_labels_of(session, task, "regression", specs.get(task.id))
    for task in repository.tasks_waiting_for_regression(session):
        report = fill_regression(session, task, waited=True)
        added += sum(len(ids) for layers in report.added.values() for ids in layers.values())
    return added


def _add(
    session: Session,
    task: Task,
    candidates: Sequence[ReviewItem],
    spec: Mapping[str, Any] | None,
    report: Backfilled,
) -> None:
    """Add the done review items' eval items to their layers (see `backfill`)."""
    if not candidates:
        return
    labels = repository.labels_of(session, [c.id for c in candidates])
    values = []
    for candidate in candidates:
        v = eval_values(task, candidate, labels.get(candidate.id, []))
        if v is None:
            report.needs_correction += 1
        elif not matchable(spec, v["expected"]):
            report.invalid_expected += 1
        else:
            values.append(v)
    taken: dict[str, set[str]] = {}
    for v in values:
        if v["layer"] not in taken:
            ids = [x["item_id"] for x in values if x["layer"] == v["layer"]]
            taken[v["layer"]] = repository.existing_ids(session, ids, v["layer"])
        held = taken[v["layer"]]
        if v["item_id"] in held or not repository.insert_item(session, v):
            report.duplicates += 1
            continue
        held.add(v["item_id"])
        report.added.setdefault(task.name, {}).setdefault(v["layer"], []).append(v["item_id"])
        report.touched.add((task.name, v["layer"]))


@dataclass(frozen=True)
class Pending:
    """Where the regression review items of a rollback (and of any later one) stand: how
    many there are, and of those whose input the regression layer does not hold yet, how
    many wait for labels, for a correction, or only for a backfill."""

    decision_id: int | None
    total: int
    # Not done: no reviewer has finished them yet ...
    to_label: int
    # ... done, but their labels give no usable expected answer: no reviewer is offered
    # them any more (review.queue.one_more sent them to as many as it does) ...
    needs_correction: int
    # ... done with a usable expected answer: the next pass puts them in the set.
    not_backfilled: int
    # Of `to_label`: labelled, but without a usable expected answer, so back in the queue
    # for another reviewer.
    unanswered: int = 0

    @property
    def missing(self) -> int:
        return self.to_label + self.needs_correction + self.not_backfilled


def pending_regression(session: Session, task: Task, since: int | None) -> Pending:
    """The regression review items rollback `since` or a later one queued (all of them when
    `since` is None) and which of them the regression layer does not hold yet."""
    found = review_repository.rollback_items(session, task.id, since)
    held = repository.layer_ids(session, task.id, "regression")
    # An item is in the set when it is labelled (done) and the set holds its input: one
    # reopened by a correction, or not labelled while another item with its input is,
    # still waits (the review queue counts it alike).
    waiting = [
        x for x in found if x.state != "done" or evalitems.item_id(task.name, x.input) not in held
    ]
    labels = repository.labels_of(session, [x.id for x in waiting])
    spec = _specs(session).get(task.id)
    done = needs = unanswered = 0
    for item in waiting:
        mine = labels.get(item.id, [])
        if item.state != "done" and not mine:
            continue
        usable = usable_answer(consensus(mine), spec, item.edge_output, item.cloud_output)
        if item.state == "done":
            done += 1
            needs += not usable
        else:
            unanswered += not usable
    return Pending(
        decision_id=since,
        total=len(found),
        to_label=len(waiting) - done,
        needs_correction=needs,
        not_backfilled=done - needs,
        unanswered=unanswered,
    )


# --- reading a layer ------------------------------------------------------------------


def task_named(session: Session, name: str) -> Task:
    found = repository.tasks_by_name(session, name)
    if not found:
        raise NotFound(no_task(name))
    return found[0]


def _layer(layer: str) -> str:
    if layer not in evalitems.LAYERS:
        raise NotFound(f"layer: {layer!r} is not one of {', '.join(evalitems.LAYERS)}")
    return layer


def layer_items(session: Session, task: Task, layer: str) -> list[EvalItem]:
    return repository.items(session, task.id, _layer(layer))


def lines_of(
    session: Session, task: Task, found: Sequence[EvalItem], *, blind: bool = False
) -> list[dict[str, Any]]:
    """The items as exported lines: the full form, or (`blind`) the form a `review` key
    reads, each pair's answers in the order its reviewers saw them."""
    if not blind:
        return [evalitems.line(x, task.name) for x in found]
    orders = repository.hidden_orders(
        session, [x.review_item_id for x in found if x.review_item_id is not None]
    )
    return [evalitems.blind_line(x, task.name, _a_is_edge(x, orders)) for x in found]


def _a_is_edge(item: EvalItem, orders: Mapping[int, bool]) -> bool:
    if item.review_item_id is not None and item.review_item_id in orders:
        return orders[item.review_item_id]
    # No review item to read the order from: one drawn from what the blind form never
    # shows (the result, its labels and times), so it says nothing of the sides either.
    return int(evalitems.sha256(evalitems.canonical(item.provenance))[-1], 16) % 2 == 0


def layer_lines(
    session: Session, task: Task, layer: str, *, blind: bool = False
) -> list[dict[str, Any]]:
    """The layer's exported lines (full, or `blind`), in export order."""
    return lines_of(session, task, layer_items(session, task, layer), blind=blind)


def layer_bytes(session: Session, task: Task, layer: str, *, blind: bool = False) -> bytes:
    """The layer's JSONL export (full, or `blind`), byte for byte."""
    return evalitems.jsonl(layer_lines(session, task, layer, blind=blind))


def layer_csv(session: Session, task: Task, layer: str, *, blind: bool = False) -> bytes:
    """The layer's CSV export (full, or `blind` with the blind form's columns)."""
    columns = evalitems.BLIND_CSV_COLUMNS if blind else evalitems.CSV_COLUMNS
    return evalitems.csv_bytes(layer_lines(session, task, layer, blind=blind), columns)


def layer_digest(session: Session, task: Task, layer: str) -> tuple[str, int]:
    """(sha256 of the layer's JSONL export, its item count): as kept by the last change to
    the layer; else read from its items once and offered for keeping (a layer made before
    digests were kept)."""
    return _layer_digest(session, task.id, task.name, _layer(layer))


def _layer_digest(session: Session, task_id: int, name: str, layer: str) -> tuple[str, int]:
    kept = repository.digest_of(session, task_id, layer)
    if kept is not None:
        return kept
    found = repository.items(session, task_id, layer)
    digest = _digest(name, found)
    repository.offer_digest(session, task_id, layer, digest, len(found))
    return digest, len(found)


def layer_hash(session: Session, task: Task, layer: str) -> str:
    """sha256 of the layer's JSONL export (the manifest's hash of that file)."""
    return layer_digest(session, task, layer)[0]


def page(
    session: Session, task: Task, layer: str, *, after: int, limit: int, blind: bool = False
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of a layer's lines (full, or `blind`) after the cursor, and the next cursor
    (None at the end)."""
    found = repository.items(session, task.id, _layer(layer), after=after, limit=limit + 1)
    more = len(found) > limit
    found = found[:limit]
    return lines_of(session, task, found, blind=blind), (found[-1].seq if more and found else None)


def sets(session: Session) -> dict[str, Any]:
    """Every task's non-empty layers with their counts and content hashes, and the hash of
    the manifest a JSONL export of them all would write."""
    rows = []
    files = []
    for name, task_id, layer, n in repository.counts(session):
        digest = _layer_digest(session, task_id, name, layer)[0]
        rows.append({"task": name, "layer": layer, "count": n, "sha256": digest})
        files.append((f"{name}/{layer}.jsonl", name, layer, "jsonl", n, digest))
    manifest = evalitems.manifest(files, evalitems.sha256(evalitems.schema_bytes()))
    return {"sets": rows, "manifest_sha256": evalitems.sha256(manifest)}


# --- the export ------------------------------------------------------------------------


@dataclass
class Exported:
    directory: Path
    files: list[tuple[str, int, str]]  # path (relative), count, sha256
    manifest: Path


def _write(path: Path, data: bytes) -> None:
    """Write atomically: readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _count(data: bytes, fmt: str) -> int:
    if fmt == "jsonl":
        return data.count(b"\n")
    import csv
    import io

    return max(0, sum(1 for _ in csv.reader(io.StringIO(data.decode()))) - 1)


def export(
    session: Session, directory: Path, *, task: str | None = None, fmt: str = "jsonl"
) -> Exported:
    """Write `<dir>/<task>/<layer>.<fmt>` for every non-empty layer (of one task, or of all),
    `<dir>/schema.json`, and `<dir>/manifest.json` listing every export file the folder
    holds (count and sha256 each). The same database content writes the same bytes."""
    if fmt not in evalitems.FORMATS:
        raise Refused(f"format: {fmt!r} is not one of {', '.join(evalitems.FORMATS)}")
    if directory.exists() and not directory.is_dir():
        raise Refused(f"out: {directory} is a file, not a folder; give a folder to write into")
    chosen = (
        [task_named(session, task)] if task is not None else repository.tasks_by_name(session, None)
    )
    written = []
    render = evalitems.jsonl if fmt == "jsonl" else evalitems.csv_bytes
    for one in chosen:
        for layer in evalitems.LAYERS:
            lines = layer_lines(session, one, layer)
            if not lines:
                continue
            data = render(lines)
            relative = f"{one.name}/{layer}.{fmt}"
            _write(directory / relative, data)
            written.append((relative, len(lines), evalitems.sha256(data)))
    schema = evalitems.schema_bytes()
    _write(directory / "schema.json", schema)
    files = []
    for path in sorted(directory.glob("*/*.*")):
        layer, _, suffix = path.name.partition(".")
        if layer not in evalitems.LAYERS or suffix not in evalitems.FORMATS or not path.is_file():
            continue
        data = path.read_bytes()
        files.append(
            (
                f"{path.parent.name}/{path.name}",
                path.parent.name,
                layer,
                suffix,
                _count(data, suffix),
                evalitems.sha256(data),
            )
        )
    _write(directory / "manifest.json", evalitems.manifest(files, evalitems.sha256(schema)))
    return Exported(directory, written, directory / "manifest.json")


# --- runs ------------------------------------------------------------------------------


def comparator_spec_or_none(session: Session, task: Task) -> dict[str, Any] | None:
    """The comparator spec of the task's current config, or None when it does not parse."""
    found = runtimes(session).get(task.id)
    return found[1].comparator_spec if found is not None else None


def comparator_spec(session: Session, task: Task) -> dict[str, Any]:
    found = runtimes(session).get(task.id)
    if found is None:
        raise Refused(f"task: the current config of {task.name} does not parse; apply a valid one")
    return found[1].comparator_spec


def scoring_items(found: Sequence[EvalItem]) -> list[scoring.Item]:
    return [scoring.Item(x.item_id, x.layer, x.bucket, x.expected) for x in found]


def blind_scoring_items(
    session: Session, task: Task, found: Sequence[EvalItem]
) -> list[scoring.Item]:
    """The items as a `review` key's runs are scored on them: each expected answer as the
    blind form has it (`lines_of(blind=True)`), in the shown form and numbering its runs
    are written in. Under `redacted` the stored expected answer keeps the masker's
    placeholder numbers, which follow the sides: a run of the answers shown as A would
    be right exactly where A was the edge's."""
    lines = lines_of(session, task, found, blind=True)
    return [
        scoring.Item(x.item_id, x.layer, x.bucket, line["expected"])
        for x, line in zip(found, lines, strict=True)
    ]


def score_run(
    session: Session,
    task: Task,
    layer: str,
    outputs: dict[str, Any],
    *,
    model: str,
    actor: str,
    note: str | None = None,
    twice: Sequence[str] = (),
) -> EvalRun:
    """Score a run of `model` on the task's layer (it must answer exactly the layer's items,
    each once: `twice` names the lines given again) and store it with the layer's content
    hash. The layer follows its labels first: a correction since the last pass is what the
    run is scored on."""
    follow_labels_of(session, task, _layer(layer), comparator_spec_or_none(session, task))
    found = layer_items(session, task, layer)
    if not found:
        raise Conflict(
            f"layer: {task.name} has no {layer} eval items yet; backfill labelled items first"
        )
    if twice:
        raise Conflict(
            f"lines: {'; '.join(twice[:5])} given twice; a run answers each item of "
            f"{task.name}/{layer} once"
        )
    try:
        scoring.same_items(
            [x.item_id for x in found], outputs, what="the run", against=f"{task.name}/{layer}"
        )
    except scoring.RunError as exc:
        raise Conflict(f"lines: {exc}") from None
    spec = comparator_spec(session, task)
    result = scoring.score(spec, scoring_items(found), scoring.Run(outputs, model))
    digest = _digest(task.name, found)
    return repository.add_run(
        session,
        EvalRun(
            task_id=task.id,
            layer=layer,
            model=model,
            set_hash=digest,
            comparator=spec_digest(spec),
            n_items=result.total.n,
            n_correct=result.total.correct,
            accuracy=result.total.accuracy,
            per_bucket={b: s.view() for b, s in result.per_bucket.items()},
            actor=actor,
            note=note,
        ),
    )


def current_comparator(session: Session, task: Task) -> str | None:
    """The digest of the comparator spec a run must have been scored with to be current (of
    the task's current config; None when it does not parse: no run is current)."""
    spec = comparator_spec_or_none(session, task)
    return spec_digest(spec) if spec is not None else None


def is_current(run: EvalRun, set_hash: str, comparator: str | None) -> bool:
    """Whether a run was scored on this set (its content hash) under this comparator."""
    return run.set_hash == set_hash and comparator is not None and run.comparator == comparator


def run_view(
    run: EvalRun,
    task: str,
    current_hash: str | None = None,
    comparator: str | None = None,
) -> dict[str, Any]:
    return {
        "id": run.id,
        "task": task,
        "layer": run.layer,
        "model": run.model,
        "set_sha256": run.set_hash,
        "current": None if current_hash is None else is_current(run, current_hash, comparator),
        "n": run.n_items,
        "correct": run.n_correct,
        "accuracy": run.accuracy,
        "per_bucket": run.per_bucket,
        "actor": run.actor,
        "note": run.note,
        "created_at": run.created_at,
    }


def list_runs(session: Session, task: Task, *, model: str | None = None) -> list[dict[str, Any]]:
    hashes: dict[str, str] = {}
    out = []
    comparator = current_comparator(session, task)
    for run in repository.runs(session, task.id, model=model):
        if run.layer not in hashes:
            hashes[run.layer] = layer_hash(session, task, run.layer)
        out.append(run_view(run, task.name, hashes[run.layer], comparator))
    return out


def compare_items(session: Session, ids: Sequence[str]) -> tuple[Task, list[EvalItem]]:
    """The eval items a run's ids name (all of one task); Refused names ids no eval set holds."""
    rows = repository.items_by_ids(session, list(ids))
    known = {item.item_id for item, _ in rows}
    if unknown := set(ids) - known:
        raise Refused(f"id: {scoring._named(unknown)} are in no eval set of this database")
    names = sorted({name for _, name in rows})
    if len(names) > 1:
        raise Refused(
            f"id: the runs hold items of several tasks ({', '.join(names)}); one task a run"
        )
    by_task: dict[str, list[EvalItem]] = defaultdict(list)
    for item, name in rows:
        by_task[name].append(item)
    found = sorted(by_task[names[0]], key=lambda x: x.seq)
    return task_named(session, names[0]), found
