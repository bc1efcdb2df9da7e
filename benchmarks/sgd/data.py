"""SGD's dev split as this benchmark reads it: the schemas, the dialogues, which services SGD's train split has
(seen) and which it has not (unseen), and the fixed dev subset the figures in ``benchmarks/SGD.md`` are run on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "sgd"

# the services of SGD's train split (Rastogi et al. 2020, table 1 and the dataset's train/schema.json): a dev
# service outside it is "unseen", the setting in which a tracker meets a schema it was never trained on
TRAIN_SERVICES = frozenset(
    [
        "Banks_1",
        "Buses_1",
        "Buses_2",
        "Calendar_1",
        "Events_1",
        "Events_2",
        "Flights_1",
        "Flights_2",
        "Homes_1",
        "Hotels_1",
        "Hotels_2",
        "Hotels_3",
        "Media_1",
        "Movies_1",
        "Music_1",
        "Music_2",
        "RentalCars_1",
        "RentalCars_2",
        "Restaurants_1",
        "RideSharing_1",
        "RideSharing_2",
        "Services_1",
        "Services_2",
        "Services_3",
        "Travel_1",
        "Weather_1",
    ]
)

# the dev subset: the first dialogues of each service in the file's order, as many as fit about 30 minutes of
# SmolLM2-135M on 2 cores (see SGD.md); fixed here so that every figure is on the same turns
SUBSET_PER_SERVICE = 3


@dataclass(frozen=True)
class Turn:
    """A user turn, the system turn after it (None after the last), and the annotation after the user turn."""

    user: str
    system: str | None
    intent: str  # "NONE": no intent
    slots: dict[str, list[str]]  # the dialogue state: each slot's acceptable spellings


@dataclass(frozen=True)
class Dialogue:
    id: str
    service: str
    turns: tuple[Turn, ...]

    @property
    def seen(self) -> bool:
        return self.service in TRAIN_SERVICES


def load_schemas(data: Path = DATA) -> dict[str, dict[str, Any]]:
    """The service schemas by name."""
    return {service["service_name"]: service for service in _read(data / "schema.json")}


def load_dialogues(data: Path = DATA) -> list[Dialogue]:
    """Every dialogue of the split, in the file's order."""
    return [_dialogue(item) for item in _read(data / "dialogues.json")]


def subset(dialogues: list[Dialogue], per_service: int = SUBSET_PER_SERVICE) -> list[Dialogue]:
    """The first ``per_service`` dialogues of each service, in the file's order."""
    taken: dict[str, int] = {}
    chosen = []
    for dialogue in dialogues:
        if taken.get(dialogue.service, 0) < per_service:
            taken[dialogue.service] = taken.get(dialogue.service, 0) + 1
            chosen.append(dialogue)
    return chosen


def _dialogue(item: dict[str, Any]) -> Dialogue:
    raw = item["turns"]
    turns = []
    for index, turn in enumerate(raw):
        if turn["speaker"] != "USER":
            continue
        after = raw[index + 1]["utterance"] if index + 1 < len(raw) and raw[index + 1]["speaker"] == "SYSTEM" else None
        turns.append(Turn(turn["utterance"], after, turn["active_intent"], dict(turn["slot_values"])))
    return Dialogue(item["dialogue_id"], item["service"], tuple(turns))


def _read(path: Path) -> Any:
    if not path.is_file():
        raise SystemExit(f"{path}: not found (the SGD data: ../shared/sgd beside the checkout, or --data DIR)")
    return json.loads(path.read_text())
