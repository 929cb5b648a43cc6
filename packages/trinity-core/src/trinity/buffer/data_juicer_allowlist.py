"""The Data-Juicer operators, and their arguments, that trinity's Data-Juicer server runs for a
client without its code opt-in (``--allow-code-ops``).

An allowlist, not a denylist: any of Data-Juicer's two hundred operators may end a string argument
in an ``eval``, an import, a model repository's code or a file read (``remove_repeat_sentences_mapper``
evaluates its ``tokenizer``; the ``hf_*`` and ``*_dir`` arguments load what they name). Each entry
below was read in Data-Juicer 1.6's source: its arguments are compared, counted, matched as regular
expressions or looked up as row fields, and the types here keep out the values that would make an
operator load something (``lang`` picks a bundled model by name, so it is one of the names).
An operator, or an argument, that is not listed is refused with a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
)

Count = Annotated[StrictInt, Field(ge=0)]
Positive = Annotated[StrictInt, Field(ge=1)]
Number = StrictInt | StrictFloat
Strings = StrictStr | list[StrictStr]
Scalar = StrictStr | StrictInt | StrictFloat | StrictBool | None
Lang = Literal["en", "zh"]
"""The languages whose bundled tokenizer (sentencepiece) an operator picks by this name."""

OPERATOR_ARGS: dict[str, Any] = {
    "text_key": StrictStr,
    "batch_size": Positive,
    "num_proc": Positive,
    "skip_op_error": StrictBool,
    "accelerator": Literal["cpu"],
}
"""Arguments every operator takes (Data-Juicer's ``OP`` base class): fields, batching, workers."""

FILTER_ARGS: dict[str, Any] = {
    "min_closed_interval": StrictBool,
    "max_closed_interval": StrictBool,
    "reversed_range": StrictBool,
}
"""Arguments every filter takes besides ``OPERATOR_ARGS`` (``stats_export_path`` writes a file: not listed)."""

RATIO = {"min_ratio": Number, "max_ratio": Number}
LENGTH = {"min_len": Count, "max_len": Count}
FIELD_SELECTOR = {"field_key": StrictStr}
MINHASH_SHAPE = {
    "tokenization": Literal["space", "punctuation", "character"],  # "sentencepiece" loads a model file
    "window_size": Positive,
    "lowercase": StrictBool,
    "ignore_pattern": StrictStr | None,
}
LLM_SCORE = {  # through the server's configured API (OPENAI_BASE_URL): no model loaded, no endpoint chosen
    "api_or_hf_model": StrictStr,
    "is_hf_model": Literal[False],
    "enable_vllm": Literal[False],
    "min_score": Number,
    "max_score": Number,
    "input_keys": list[StrictStr],
    "field_names": list[StrictStr],
    "system_prompt": StrictStr | None,
    "input_template": StrictStr | None,
    "field_template": StrictStr | None,
    "try_num": Positive,
    "sampling_params": dict[StrictStr, Scalar],
    "dim_required_keys": list[StrictStr] | None,
    "preferred_output_lang": StrictStr | None,
}
CLEANER = {"pattern": StrictStr | None, "repl": StrictStr}

FILTERS: dict[str, dict[str, Any]] = {
    "alphanumeric_filter": {"tokenization": StrictBool, **RATIO},
    "average_line_length_filter": LENGTH,
    "character_repetition_filter": {"rep_len": Positive, **RATIO},
    "maximum_line_length_filter": LENGTH,
    "special_characters_filter": RATIO,
    "specified_field_filter": {"field_key": StrictStr, "target_value": list[Scalar]},
    "specified_numeric_field_filter": {"field_key": StrictStr, "min_value": Number, "max_value": Number},
    "suffix_filter": {"suffixes": Strings},
    "text_length_filter": LENGTH,
    "word_repetition_filter": {"lang": Lang, "tokenization": StrictBool, "rep_len": Positive, **RATIO},
    "words_num_filter": {"lang": Lang, "tokenization": StrictBool, "min_num": Count, "max_num": Count},
    "llm_analysis_filter": LLM_SCORE,
    "llm_difficulty_score_filter": LLM_SCORE,
    "llm_quality_score_filter": LLM_SCORE,
}

OTHERS: dict[str, dict[str, Any]] = {
    "clean_copyright_mapper": {},
    "clean_email_mapper": CLEANER,
    "clean_html_mapper": {},
    "clean_ip_mapper": CLEANER,
    "clean_links_mapper": CLEANER,
    "expand_macro_mapper": {},
    "fix_unicode_mapper": {"normalization": Literal["NFC", "NFKC", "NFD", "NFKD"] | None},
    "punctuation_normalization_mapper": {},
    "remove_bibliography_mapper": {},
    "remove_comments_mapper": {"doc_type": Strings, "inline": StrictBool, "multiline": StrictBool},
    "remove_header_mapper": {"drop_no_head": StrictBool},
    "remove_long_words_mapper": LENGTH,
    "remove_non_chinese_character_mapper": {
        "keep_alphabet": StrictBool,
        "keep_number": StrictBool,
        "keep_punc": StrictBool,
    },
    "remove_repeat_sentences_mapper": {  # not its ``tokenizer``: a string it evaluates
        "lowercase": StrictBool,
        "ignore_special_character": StrictBool,
        "min_repeat_sentence_length": Count,
    },
    "remove_specific_chars_mapper": {"chars_to_remove": Strings},
    "remove_table_text_mapper": {"min_col": Positive, "max_col": Positive},
    "replace_content_mapper": {"pattern": Strings | None, "repl": Strings},
    "text_chunk_mapper": {  # not its ``tokenizer`` and ``trust_remote_code``: a model repository's code
        "max_len": Positive | None,
        "split_pattern": StrictStr | None,
        "overlap_len": Count,
    },
    "whitespace_normalization_mapper": {},
    "document_deduplicator": {"lowercase": StrictBool, "ignore_non_character": StrictBool},
    "document_minhash_deduplicator": {
        **MINHASH_SHAPE,
        "num_permutations": Annotated[StrictInt, Field(ge=1, le=4096)],
        "jaccard_threshold": Annotated[Number, Field(ge=0, le=1)],
        "num_bands": Positive | None,
        "num_rows_per_band": Positive | None,
    },
    "document_simhash_deduplicator": {
        **MINHASH_SHAPE,
        "num_blocks": Positive,
        "hamming_distance": Positive,
    },
    "random_selector": {"select_ratio": Number | None, "select_num": Count | None},
    "frequency_specified_field_selector": {**FIELD_SELECTOR, "top_ratio": Number | None, "topk": Count | None},
    "range_specified_field_selector": {
        **FIELD_SELECTOR,
        "lower_percentile": Number | None,
        "upper_percentile": Number | None,
        "lower_rank": Count | None,
        "upper_rank": Count | None,
    },
    "tags_specified_field_selector": {**FIELD_SELECTOR, "target_tags": list[StrictStr] | None},
    "topk_specified_field_selector": {
        **FIELD_SELECTOR,
        "top_ratio": Number | None,
        "topk": Count | None,
        "reverse": StrictBool,
    },
}


def _arguments_model(name: str, arguments: dict[str, Any]) -> type[BaseModel]:
    """A model of one operator's arguments: each optional (Data-Juicer has its defaults), none else."""
    fields = {argument: (kind, None) for argument, kind in arguments.items()}
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


ALLOWED: dict[str, type[BaseModel]] = {
    **{name: _arguments_model(name, {**OPERATOR_ARGS, **FILTER_ARGS, **args}) for name, args in FILTERS.items()},
    **{name: _arguments_model(name, {**OPERATOR_ARGS, **args}) for name, args in OTHERS.items()},
}
"""Each allowed operator's name and the model of the arguments it may be given."""


def refusal(recipe: dict[str, Any]) -> str | None:
    """Why the server may not run ``recipe`` without the code opt-in (the first operator, argument
    or key outside the allowlist, named by its place in the recipe), or None when it may."""
    if recipe.get("custom_operator_paths"):
        return "custom_operator_paths: Python files that Data-Juicer imports"
    for index, operator in enumerate(recipe.get("process") or []):
        for name, arguments in operator.items():
            if name not in ALLOWED:
                return f"process.{index}.{name}: not an allowed operator"
            try:
                ALLOWED[name].model_validate(arguments or {})
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(part) for part in problem["loc"])
                if problem["type"] == "extra_forbidden":
                    return f"process.{index}.{name}.{where}: not an allowed argument of {name}"
                return f"process.{index}.{name}.{where}: {problem['msg']}"
    return None
