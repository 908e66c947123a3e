// The page tests/test_vitessce.py opens (bundled with esbuild from the pinned packages of
// package-lock.json): Vitessce showing the h5ad a view config names, read through its h5lens
// manifest. `?config=URL` names the config (h5lens vitessce-config writes it); `?route=` says how
// Vitessce gets the manifest:
//   refspec  Vitessce's own anndata.h5ad file type with options.refSpecUrl (Vitessce fetches the
//            manifest and builds its ReferenceStore itself)
//   stores   the page opens the manifest with h5lens-codecs' ReferenceStore and gives it to
//            <Vitessce stores={{[h5adUrl]: store}}>, the route for Vitessce 4 (docs/browser.md)
import { createElement } from "react";
import { createRoot } from "react-dom/client";
import { ReferenceStore } from "h5lens-codecs";
import { Vitessce } from "vitessce";

const params = new URLSearchParams(location.search);
const config = await (await fetch(params.get("config"))).json();
const stores = {};
if (params.get("route") === "stores") {
	for (const dataset of config.datasets) {
		for (const file of dataset.files) {
			if (file.options?.refSpecUrl) stores[file.url] = await ReferenceStore.fromUrl(file.options.refSpecUrl);
		}
	}
}
createRoot(document.getElementById("root")).render(createElement(Vitessce, { config, stores, height: 660, theme: "light" }));
document.title = "ready";
