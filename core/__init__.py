"""The shared vocabulary beneath tuner, workers and db (it imports none of them): the frozen
dataclasses that cross process and Ray boundaries (:mod:`core.types`), the one exception tree
(:mod:`core.errors`), SGLang flag tables and rendering (:mod:`core.flags`, :mod:`core.render`),
redaction of secrets (:mod:`core.redact`), GPU gates (:mod:`core.hardware`) and one-line validation
errors (:mod:`core.validation`)."""
