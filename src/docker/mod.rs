//! All Docker Engine API calls (bollard) and registry HTTP calls. Decides no policy.
