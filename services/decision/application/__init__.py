"""Decision use case (:mod:`.decide`) and its ports (:mod:`.ports`)."""
