"""Stand-in for BrowseComp-Plus's searchers: ``index_path`` is a JSON file ``{docid: text}``; a
search ranks documents by how many query words they contain."""

import json
from pathlib import Path


class WordCountSearcher:
    def __init__(self, args):
        self.documents = json.loads(Path(args.index_path).read_text())

    def search_description(self, k):
        return f"Search the corpus; returns the top {k} documents."

    def get_document_description(self):
        return "Read a whole document by its docid."

    def search(self, query, k):
        words = query.lower().split()
        scored = [(sum(text.lower().count(w) for w in words), docid, text) for docid, text in self.documents.items()]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:k]
        return [{"docid": docid, "score": float(score), "text": text} for score, docid, text in ranked]

    def get_document(self, docid):
        text = self.documents.get(docid)
        return None if text is None else {"docid": docid, "text": text}


class SearcherType:
    @staticmethod
    def get_searcher_class(name):
        if name != "bm25":
            raise ValueError(f"unknown searcher {name}")
        return WordCountSearcher
